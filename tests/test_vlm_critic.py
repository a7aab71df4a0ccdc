"""Vision-language critic (critic.kind=vlm, the paper's frontend critic) on a tiny random Qwen2-VL built here (no hub):
inputs, one training step, loading through `load_any_critic`, ranking through `score_any`; the wrong-combination
errors; the page screenshots the stages hand it; the paper-frontend profile that selects it.

The screenshots are small PNGs drawn with PIL (a page's background colour and a bar), standing for the renderer's
screenshots of the HTML the agent wrote; `FakeRenderer` maps a page's `background:<colour>` to such a PNG.
"""

from __future__ import annotations

import io
import json
import math
import re
from types import SimpleNamespace

import pytest
import torch
from PIL import Image
from pydantic import ValidationError
from transformers import (AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                          Qwen2VLImageProcessor)

from sweet import render as R
from sweet.algos import scoring as S
from sweet.algos import vlm_critic as VC
from sweet.colbench.frontend import PageScreens
from sweet.config import CriticConfig, load_config
from tests.test_algos import build_chatml_tokenizer, save_tiny_qwen2

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 180, 30), "white": (255, 255, 255)}


def page(colour: str, text: str = "Hello") -> str:
    return f'<html><body style="background:{colour}"><h1>{text}</h1></body></html>'


def shot(colour: str, height: int = 240) -> bytes:
    """A 320 x `height` stand-in screenshot: the page's background colour with a dark title bar."""
    img = Image.new("RGB", (320, height), COLOURS[colour])
    img.paste((20, 20, 20), (20, 20, 200, 50))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class FakeRenderer:
    """`Renderer.render_many` stand-in: a page's screenshot from its background colour; counts what it renders."""

    def __init__(self):
        self.rendered: list[str] = []

    def render_many(self, htmls, dom=False):
        self.rendered += list(htmls)
        return [SimpleNamespace(png=shot(re.search(r"background:(\w+)", h).group(1))) for h in htmls]

    def close(self):
        pass


def save_tiny_qwen2_vl(path) -> str:
    """A 2-layer Qwen2-VL (hidden 32, a 1-block vision tower of width 32, patch 14, merge 2) with fixed random
    weights, the ChatML test tokenizer plus Qwen2-VL's vision tokens, and an image processor that makes a 320 x 240
    screenshot 12 image tokens; saved to `path` like a downloaded model folder."""
    tok = build_chatml_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [VC.VISION_START, VC.IMAGE_PAD, VC.VISION_END]})
    ids = {t: tok.convert_tokens_to_ids(t) for t in (VC.VISION_START, VC.IMAGE_PAD, VC.VISION_END)}
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids[VC.IMAGE_PAD], vision_start_token_id=ids[VC.VISION_START],
        vision_end_token_id=ids[VC.VISION_END], tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny_qwen2_vl"))


def frontend_traj(colours: list[str], reward: float) -> dict:
    """A frontend trajectory: each assistant turn writes a page; the reference page is the white one."""
    msgs = [{"role": "system", "content": "You build web pages."}, {"role": "user", "content": "Make my page."}]
    for i, c in enumerate(colours):
        if i:
            msgs.append({"role": "user", "content": f"Not quite ({i})."})
        msgs.append({"role": "assistant", "content": f"Draft {i}:\n{page(c)}"})
    return {"messages": msgs, "reward": reward, "training_info": page("white", "Target"),
            "turn_images": [shot(c) for c in colours], "info_image": shot("white")}


def vlm_cfg(**kw) -> CriticConfig:
    return CriticConfig(**{"kind": "vlm", "max_length": 512, "batch_size": 2, "epochs": 1, "save_steps": 10,
                           "lora_r": 4, "lora_alpha": 8, "lr": 1e-2, **kw})


def test_screenshots_sit_inside_the_action_span_and_follow_a_length_cut(vl_dir):
    inputs = VC.vlm_inputs(vl_dir)
    png, n = inputs.screens.prepare(shot("red"))
    assert n == 12 and Image.open(io.BytesIO(png)).size == (112, 84)  # resized once, to the processor's size
    traj = frontend_traj(["red", "blue"], 0.5)
    row = VC.encode_trajectory(inputs, traj, vlm_cfg())
    ids, turns, pad = row["input_ids"], row["turn_ids"], inputs.image_pad_id
    assert len(row["images"]) == 3 and sum(i == pad for i in ids) == 3 * n  # c + one page per turn
    # c's pads come before any turn; each turn's pads lie inside that turn's pooled span
    pads = [turns[p] for p, i in enumerate(ids) if i == pad]
    assert pads == [-1] * n + [0] * n + [1] * n
    batch = VC.collate([row], inputs)
    assert batch["pixel_values"].shape[0] == 3 * 4 * n and batch["image_grid_thw"].tolist() == [[1, 6, 8]] * 3
    # without c, no reference image; a turn without a page adds no image
    bare = VC.encode_trajectory(inputs, dict(traj, turn_images=[None, shot("blue")]),
                                vlm_cfg(use_training_info=False))
    assert len(bare["images"]) == 1 and sum(i == pad for i in bare["input_ids"]) == n
    # a length cut drops the oldest exchange together with its screenshot
    cut = VC.encode_trajectory(inputs, traj, vlm_cfg(max_length=len(ids) - 5))
    assert len(cut["images"]) == 2 and sum(i == pad for i in cut["input_ids"]) == 2 * n
    assert max(cut["turn_ids"]) == 0


def test_vlm_critic_trains_one_step_loads_and_ranks_candidates(vl_dir, tmp_path):
    trajs = [frontend_traj(["red"], 0.2), frontend_traj(["blue", "white"], 0.9)]
    final = VC.train_vlm_critic(trajs, vl_dir, tmp_path, vlm_cfg(), device="cpu")
    conf = json.loads((final / "critic_config.json").read_text())
    assert (conf["kind"], conf["head"], conf["lora"]) == ("vlm", "value", True)
    (state,) = [json.loads(f.read_text()) for f in (tmp_path / "checkpoints").glob("checkpoint-*/trainer_state.json")]
    assert state["global_step"] == 1  # 2 trajectories, batch 2: one optimiser step
    head = torch.load(final / "value_head.pt")
    assert head["weight"].abs().sum() > 0  # zero-initialised: the step moved it
    assert head["bias"].item() == pytest.approx(0.55, abs=0.05)  # started at the mean reward
    # The vision tower stays frozen: LoRA only on the language model (and the head).
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert adapter["target_modules"] == VC.LM_LINEAR

    renderer = FakeRenderer()
    screens = PageScreens(lambda: renderer)
    critic = S.load_any_critic(final, "cpu", screenshots=screens)
    assert critic.kind == "vlm"
    history = trajs[1]["messages"][:-1]
    cands = [f"Draft:\n{page('red')}", f"Draft:\n{page('green')}", f"Draft:\n{page('white')}", "Which colour?"]
    first = S.score_any(critic, history, cands, trajs[1]["training_info"])
    again = S.score_any(critic, history, cands, trajs[1]["training_info"])
    assert len(first) == len(cands) and all(math.isfinite(x) for x in first)
    assert first == again  # deterministic
    assert len({round(x, 7) for x in first[:3]}) == 3  # candidates whose pages differ score differently
    # each distinct page rendered once, whatever the number of calls: history, candidates, reference
    assert sorted(renderer.rendered) == sorted({page("blue"), page("red"), page("green"), page("white"),
                                                page("white", "Target")})
    assert math.isfinite(S.score_trajectory_any(critic, trajs[0]["messages"], trajs[0]["training_info"]))
    with pytest.raises(ValueError, match="reads screenshots"):
        S.score_any(S.LoadedCritic("vlm", critic.model, critic.tokenizer, conf), history, cands, "")


def test_vlm_critic_refuses_a_text_only_base_and_a_backend_run(tmp_path):
    text_base = save_tiny_qwen2(tmp_path / "text")
    with pytest.raises(ValueError, match="needs a Qwen2-VL base model .* is a 'qwen2' model"):
        VC.train_vlm_critic([frontend_traj(["red"], 0.5)], text_base, tmp_path / "out", vlm_cfg(), device="cpu")
    with pytest.raises(ValidationError, match="critic.kind='vlm' reads screenshots of frontend pages"):
        load_config("tiny", ["critic.kind=vlm"])
    assert load_config("tiny", ["task_family=frontend", "critic.kind=vlm"]).critic.kind == "vlm"
    # ablations of the text critic's head would run the same vlm critic under another label
    with pytest.raises(ValidationError, match="method=value_head changes the text critic only"):
        load_config("paper-frontend", ["method=value_head"])
    assert load_config("paper-frontend", ["method=no_training_info"]).critic.use_training_info is False


def test_page_screens_render_each_page_once_and_keep_them_on_disk(tmp_path):
    renderer, made = FakeRenderer(), []
    screens = PageScreens(lambda: made.append(1) or renderer, folder=tmp_path / "screens")
    texts = [f"a\n{page('red')}", "no page here", page("red"), page("blue")]
    out = screens(texts)
    assert out[0] == out[2] == shot("red") and out[1] is None and out[3] == shot("blue")
    assert renderer.rendered == [page("red"), page("blue")] and len(list((tmp_path / "screens").iterdir())) == 2
    other = PageScreens(lambda: made.append(1) or FakeRenderer(), folder=tmp_path / "screens")
    assert other(texts) == out and len(made) == 1  # read back: no second browser started


def test_paper_frontend_selects_the_qwen2_vl_critic_and_the_released_budgets():
    cfg = load_config("paper-frontend")
    c = cfg.critic
    assert (c.kind, cfg.models.critic_base) == ("vlm", "Qwen/Qwen2-VL-7B-Instruct")
    assert c.lora and c.epochs == 8 and (c.schedule, c.warmup_ratio, c.adam_betas) == ("cosine", 0.03, (0.9, 0.95))
    assert cfg.models.policy == "meta-llama/Llama-3.1-8B-Instruct"
    # simulator budgets as released: up to 4,096 new tokens, replies cut at 1,000 characters
    assert cfg.collect.sim_max_new_tokens == cfg.evaluate.sim_max_new_tokens == 4096
    assert cfg.frontend.sim_reply_chars == 1000
    assert cfg.pairs.max_pairs_per_task == 0  # no cap: every pair the margin rule gives
    assert (cfg.tasks.n_train, cfg.collect.k) == (1000, 6)  # the released frontend set: 1,000 tasks x 6
    assert cfg.frontend.win_rate_baseline == "gpt-4o" and "api:gpt-4o" in cfg.evaluate.agents
    assert cfg.frontend.screenshot_max_height == 4 * cfg.frontend.viewport_height  # the named clip, 4x viewport
    with pytest.raises(ValidationError, match="screenshot_max_height"):
        load_config("paper-frontend", ["frontend.screenshot_max_height=500"])


def test_no_pair_cap_keeps_every_pair():
    from sweet.stages.pairs import make_pairs
    trajs = [{"task_id": "t", "traj_id": f"x{i}", "sample_idx": i, "reward": r, "messages": "[]",
              "training_info": ""} for i, r in enumerate([0.9, 0.6, 0.3, 0.0])]
    assert len(make_pairs(trajs, 0.1, 0)) == 6 and len(make_pairs(trajs, 0.1, 2)) == 2


def test_tokenizer_without_vision_tokens_is_refused(tmp_path):
    text_base = save_tiny_qwen2(tmp_path / "text")
    inputs = VC.VLMInputs(AutoTokenizer.from_pretrained(text_base), None)
    with pytest.raises(ValueError, match="no <\\|image_pad\\|> token"):
        _ = inputs.image_pad_id


@pytest.mark.skipif(not R.browser_available()[0], reason="no browser")
def test_the_critic_stage_renders_each_page_once_with_the_real_renderer(tmp_path):
    """The stage's helper: real screenshots from Chromium (320 x 240 viewport, clipped at frontend.
    screenshot_max_height), kept in the stage folder and read back without a browser."""
    from sweet.stages.critic import screened_trajectories
    cfg = load_config("tiny", ["task_family=frontend", "critic.kind=vlm", "frontend.pool_size=1",
                               "frontend.viewport_width=320", "frontend.viewport_height=240",
                               "frontend.screenshot_max_height=480"])
    trajs = [{k: t[k] for k in ("messages", "reward", "training_info")}
             for t in (frontend_traj(["red", "blue"], 0.3), frontend_traj(["red"], 0.8))]
    tall = dict(trajs[1], training_info='<html><body><div style="height:5000px"></div></body></html>')
    out = screened_trajectories(cfg, tmp_path, [trajs[0], tall])
    assert [len(t["turn_images"]) for t in out] == [2, 1] and out[0]["turn_images"][0] == out[1]["turn_images"][0]
    sizes = [Image.open(io.BytesIO(p)).size for p in out[0]["turn_images"] + [out[1]["info_image"]]]
    assert sizes == [(320, 240), (320, 240), (320, 480)]  # the long page clipped at the named height
    assert len(list((tmp_path / "screens").glob("*.png"))) == 4  # red, blue, white reference, tall reference
    again = screened_trajectories(cfg.model_copy(update={"frontend": None}), tmp_path, [trajs[0], tall])
    assert again == out  # read back from disk: no renderer made (a config without frontend settings would fail)


def test_the_candidates_stage_ranks_with_a_vlm_critic_and_its_screens(vl_dir, tmp_path, monkeypatch):
    """The wiring of stage 5 with critic.kind=vlm: the stage loads the trained vlm critic with a `PageScreens` over
    the run's renderer (FakeRenderer stands for Chromium), scores every sampled candidate, and writes candidates
    and DPO pairs. The policy is a tiny random text Qwen2 (its candidates are noise; what is checked is the path)."""
    from sweet.colbench import registry
    from sweet.stages.candidates import sample_and_rank_candidates
    from sweet.store import dumps, read_rows, write_rows

    renderer = FakeRenderer()
    monkeypatch.setattr(registry, "frontend_renderer", lambda cfg: renderer)
    trajs = [frontend_traj(["red"], 0.2), frontend_traj(["blue", "green"], 0.9)]
    critic_dir = tmp_path / "critic_stage"
    VC.train_vlm_critic(trajs, vl_dir, critic_dir, vlm_cfg(), device="cpu")  # writes critic_dir/critic
    trajs_dir = tmp_path / "collect"
    trajs_dir.mkdir()
    write_rows([{"traj_id": f"t{i}__0", "task_id": f"t{i}", "messages": dumps(t["messages"]), "reward": t["reward"],
                 "training_info": t["training_info"]} for i, t in enumerate(trajs)],
               trajs_dir / "trajectories.parquet")
    policy = save_tiny_qwen2(tmp_path / "policy")
    cfg = load_config("micro", ["task_family=frontend", "critic.kind=vlm", f"models.policy={policy}",
                                "models.device=cpu", "engine.backend=hf", "candidates.n=3",
                                "candidates.max_new_tokens=8", "candidates.turn_fraction=1.0",
                                "candidates.max_turns=10", "candidates.pairs_per_turn=1"])
    out = tmp_path / "candidates"
    out.mkdir()
    stats = sample_and_rank_candidates(cfg, out, str(trajs_dir), str(critic_dir))
    rows = read_rows(out / "candidates.parquet")
    assert stats["turns"] == 3 and len(rows) == 9  # three agent turns, three candidates each
    assert all(math.isfinite(r["score"]) for r in rows)
    assert stats["dpo_pairs"] == 3 and len(read_rows(out / "dpo_pairs.parquet")) == 3
    # The critic read the pages of the histories and the reference through the stage's renderer.
    assert {page("blue"), page("white", "Target")} <= set(renderer.rendered)
