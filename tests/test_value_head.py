"""Value-head critic (ablation 'value function'): loss by hand, pooled span, training, scoring, dispatch; tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from peft import get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from sweet.algos import critic as C
from sweet.algos import scoring as S
from sweet.algos import value_head as V
from sweet.algos.dialogue import tokenize_dialogue, with_training_info
from sweet.algos.training import lora_config
from sweet.config import CriticConfig
from tests.test_algos import CANDS, Recorder, dialogue, save_tiny_qwen2

GOOD, BAD = "I WANT TO ANSWER: def add(a, b): return a + b", "I WANT TO ANSWER: def f(x): return x * 2"
INFO = "def add(a, b):\n    return a + b"


class ValueConfig(CriticConfig):
    """Stands for CriticConfig(head='value') whether or not CriticConfig declares `head` yet."""
    head: str = "value"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2_value"))


def value_model(model_dir: str):
    """LoRA + head with non-trivial weights (B and the head perturbed), as a trained critic would have."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    V.attach_value_head(base, bias=0.3)
    model = get_peft_model(base, V.value_lora_config(4, 8)).eval()
    g = torch.Generator().manual_seed(3)
    for n, p in model.named_parameters():
        if "lora_B" in n or "modules_to_save" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5
    return model, AutoTokenizer.from_pretrained(model_dir)


def trajectories(n: int) -> list[dict]:
    return [{"messages": dialogue(1 + i % 3, GOOD if i % 2 == 0 else BAD), "reward": 1.0 if i % 2 == 0 else 0.0,
             "training_info": INFO} for i in range(n)]


def test_value_loss_equals_hand_computation(tiny_dir):
    model, tok = value_model(tiny_dir)
    cfg = ValueConfig(max_length=256)
    trajs = [dict(t, reward=r) for t, r in zip(trajectories(3), [0.25, 1.0, 0.0])]  # 1, 2 and 3 assistant turns
    batch = V.collate_trajectories([V.encode_trajectory(tok, t, cfg) for t in trajs], tok.pad_token_id)
    loss, values, present = V.value_loss(model, batch)
    head = model.get_base_model().value_head.modules_to_save["default"]
    decoder = model.get_base_model().get_decoder()
    errs = []
    with torch.no_grad():
        for t in trajs:  # one example per assistant turn: c + the dialogue cut right after a_t, run on its own
            msgs = with_training_info(t["messages"], INFO)
            for i in [k for k, m in enumerate(msgs) if m["role"] == "assistant"]:
                tokd = tokenize_dialogue(tok, msgs[:i + 1])
                s, e = tokd["turn_spans"][-1]
                hidden = decoder(input_ids=torch.tensor([tokd["input_ids"]])).last_hidden_state[0]
                pooled = hidden[s:e].mean(0)
                v = float(pooled @ head.weight[0] + head.bias[0])
                errs.append((v - t["reward"]) ** 2)
    assert present.sum().item() == len(errs) == 6
    assert loss.item() == pytest.approx(sum(errs) / len(errs), rel=1e-5)
    assert len({round(e, 6) for e in errs}) > 1  # non-trivial values


def test_pooling_covers_exactly_the_action_tokens(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = dialogue(3)
    row = V.encode_trajectory(tok, {"messages": msgs, "reward": 1.0, "training_info": INFO}, ValueConfig())
    want = [m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"]
    got = [tok.decode([t for t, k in zip(row["input_ids"], row["turn_ids"]) if k == j]) for j in range(len(want))]
    assert got == want
    # At ranking time the pooled span is each candidate's own tokens, with or without the shared prefix cache.
    model, _ = value_model(tiny_dir)
    for shared in (True, False):
        ids, attn, cache, off, lens = C.candidate_inputs(model, tok, msgs[:-1], CANDS, shared, None)
        mask = C.span_mask(ids.shape[1], off, lens).bool()
        assert [tok.decode(ids[i][mask[i]]) for i in range(len(CANDS))] == [c + "<|im_end|>" for c in CANDS]


def test_train_value_critic_end_to_end(tiny_dir, tmp_path):
    cfg = ValueConfig(lr=1e-2, epochs=1, batch_size=2, save_steps=1, lora_r=4, lora_alpha=8, max_length=256)
    trajs = trajectories(4)  # 2 steps
    rec = Recorder()
    out = V.train_value_critic(trajs, tiny_dir, tmp_path, cfg, callbacks=[rec])
    assert out == tmp_path / "critic" and rec.steps == [1, 2]
    for f in ("adapter_config.json", "adapter_model.safetensors", "value_head.pt", "tokenizer_config.json"):
        assert (out / f).exists(), f
    conf = json.loads((out / "critic_config.json").read_text())
    assert conf["head"] == "value" and conf["lora"] is True and conf["base_model"] == tiny_dir
    # Head starts at the mean reward with zero weights: the first batch's loss is its rewards' variance (1, 0).
    assert [e["loss"] for e in rec.logs if "loss" in e][0] == pytest.approx(0.25, abs=1e-6)
    head = torch.load(out / "value_head.pt")
    adapter = load_file(out / "adapter_model.safetensors")
    assert torch.equal(head["weight"], adapter["base_model.model.value_head.weight"]) and head["weight"].abs().sum() > 0
    hist, cands = dialogue(2)[:-1], CANDS + [GOOD, BAD]
    model, tok = V.load_value_critic(out, "cpu")
    a = V.score_candidates_value(model, tok, hist, cands, INFO)
    assert len(a) == len(cands) and all(math.isfinite(x) for x in a) and len(set(a)) > 1
    assert a == V.score_candidates_value(model, tok, hist, cands, INFO)  # deterministic
    slow = V.score_candidates_value(model, tok, hist, cands, INFO, shared_prefix=False)
    assert max(abs(x - y) for x, y in zip(a, slow)) < 1e-5
    # Deterministic, and the head survives a crash: crash in step 2, resume from checkpoint-1, end where run 1 ended.
    with pytest.raises(KeyboardInterrupt):
        V.train_value_critic(trajs, tiny_dir, tmp_path / "b", cfg, callbacks=[Recorder(stop_at=2)])
    rec_b = Recorder()
    again = V.train_value_critic(trajs, tiny_dir, tmp_path / "b", cfg, callbacks=[rec_b])
    assert rec_b.steps == [2]
    assert torch.allclose(head["weight"], torch.load(again / "value_head.pt")["weight"], atol=1e-6)
    # Dispatcher: picks the value critic, ignores the LM-only flags, defaults use_training_info from the config.
    crit = S.load_any_critic(out, "cpu")
    assert crit.kind == "value"
    assert S.score_any(crit, hist, cands, INFO, length_norm=False, ref_with_training_info=False) == a
    with pytest.raises(TypeError):
        S.score_any(crit, hist, cands, INFO, bogus=1)


def test_dispatcher_picks_the_lm_critic(tiny_dir, tmp_path):
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    peft = get_peft_model(base, lora_config(4, 8))
    g = torch.Generator().manual_seed(1)
    for n, p in peft.named_parameters():
        if "lora_B" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5
    out = tmp_path / "critic"
    peft.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(out)
    C.write_critic_config(out, CriticConfig(variant="official", length_norm=False), head="lm", lora=True,
                          base_model=tiny_dir)
    crit = S.load_any_critic(out, "cpu")
    assert crit.kind == "lm"
    hist = dialogue(2)[:-1]
    want = C.score_candidates(crit.model, crit.tokenizer, hist, CANDS, INFO, length_norm=False,
                              ref_with_training_info=False)
    assert S.score_any(crit, hist, CANDS, INFO) == want  # flags default to the trained config
    assert S.score_any(crit, hist, CANDS, INFO, length_norm=True) != want
    conf = json.loads((out / "critic_config.json").read_text())
    (out / "critic_config.json").write_text(json.dumps(dict(conf, head="q")))
    with pytest.raises(ValueError, match="unknown critic head"):
        S.load_any_critic(out, "cpu")
