"""Training on the CPU. models.cpu_precision: bf16 autocast for CPU training and critic scoring where the CPU has
AMX, float32 elsewhere; resolved into the fingerprints of the stages it changes, so a cache made in one precision is
never a hit for the other. And the laptop profile's one pair per forward (batch_size 1 x grad_accum 2), which must
train what a two-pair batch does. The tiny random Qwen2 of test_algos stands for the 0.5B (same code paths, seconds
instead of minutes)."""

from __future__ import annotations

import math

import pytest
import torch

from sweet import models, pipeline, precision
from sweet.algos import critic as C
from sweet.algos.training import LOG_FILE, first_pass_fit, training_kwargs
from sweet.config import CriticConfig, load_config
from sweet.stages import ACTOR, CANDIDATES, COLLECT, CRITIC, EVALUATE, PAIRS
from sweet.stages.critic import critic_fit
from tests.test_algos import critic_model, critic_pairs, save_tiny_qwen2


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture(autouse=True)
def _library_default():
    yield
    precision.set_cpu_precision("fp32")  # what a library call gets; no test leaks its choice into the next


@pytest.mark.parametrize("amx, want", [(True, "bf16"), (False, "fp32")])
def test_auto_is_bf16_only_where_the_cpu_has_amx(monkeypatch, amx, want):
    monkeypatch.setattr(precision, "cpu_has_amx_bf16", lambda: amx)
    assert precision.resolve_cpu_precision("auto") == want
    assert precision.resolve_cpu_precision("fp32") == "fp32" and precision.resolve_cpu_precision("bf16") == "bf16"
    assert precision.set_cpu_precision("auto") == want and precision.cpu_bf16("cpu") == (want == "bf16")
    assert not precision.cpu_bf16("cuda")  # GPUs load bf16 weights instead; autocast is for the CPU only
    with pytest.raises(ValueError, match="cpu_precision"):
        precision.resolve_cpu_precision("fp16")


def test_the_fingerprint_names_the_precision_that_ran(monkeypatch):
    """auto on an AMX CPU and an explicit bf16 compute the same thing (one cache entry); fp32 another. Stages that
    never run torch on the CPU (collection on llama.cpp, pairs) do not depend on it."""
    cfg = load_config("tiny")
    monkeypatch.setattr(precision, "cpu_has_amx_bf16", lambda: True)
    monkeypatch.setattr(models, "pick_device", lambda device="auto": "cpu")

    def set_to(mode):
        return cfg.model_copy(update={"models": cfg.models.model_copy(update={"cpu_precision": mode})})

    for stage in (CRITIC, CANDIDATES, ACTOR, EVALUATE):
        auto, bf16, fp32 = (pipeline.config_slice(set_to(p), stage.config_keys) for p in ("auto", "bf16", "fp32"))
        assert auto["models.cpu_precision"] == "bf16" and auto == bf16 and fp32["models.cpu_precision"] == "fp32"
    for stage in (COLLECT, PAIRS):
        assert "models.cpu_precision" not in pipeline.config_slice(cfg, stage.config_keys)
    monkeypatch.setattr(models, "pick_device", lambda device="auto": "cuda")  # a GPU run: not counted at all
    assert "models.cpu_precision" not in pipeline.config_slice(cfg, CRITIC.config_keys)


def test_training_arguments_ask_for_bf16_on_the_cpu_only_when_told(tmp_path):
    cfg = CriticConfig()
    precision.set_cpu_precision("fp32")
    assert training_kwargs(cfg, tmp_path, "cpu")["bf16"] is False
    precision.set_cpu_precision("bf16")
    assert training_kwargs(cfg, tmp_path, "cpu")["bf16"] is True


def _linear_output_dtypes(model) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    layer.register_forward_hook(lambda _m, _a, out: seen.append(out.dtype))
    return seen


def test_scoring_runs_its_matmuls_in_bf16_when_set_and_stays_close(tiny_model_dir):
    model, tok = critic_model(tiny_model_dir, perturb=True)
    seen = _linear_output_dtypes(model)
    hist = [{"role": "user", "content": "Write add(a, b)."}]
    cands = ["def add(a, b):\n    return a + b", "What should add return?", "no idea"]
    precision.set_cpu_precision("fp32")
    exact = C.score_candidates(model, tok, hist, cands, "def add(a, b): return a + b")
    assert set(seen) == {torch.float32}
    seen.clear()
    precision.set_cpu_precision("bf16")
    fast = C.score_candidates(model, tok, hist, cands, "def add(a, b): return a + b")
    assert set(seen) == {torch.bfloat16}
    assert all(isinstance(s, float) and math.isfinite(s) for s in fast)
    assert fast == pytest.approx(exact, abs=0.05)  # bf16 keeps ~3 significant digits; the logits stay float32
    assert next(model.parameters()).dtype == torch.float32  # autocast: the weights are not converted


def test_critic_trains_under_bf16_autocast_with_float32_weights(tiny_model_dir, tmp_path):
    """The Trainer's bf16 on the CPU: the steps run (autocast), the saved adapter is float32, and it learns."""
    precision.set_cpu_precision("bf16")
    cfg = CriticConfig(lr=2e-2, epochs=4, batch_size=2, save_steps=100, lora_r=4, lora_alpha=8, max_length=256)
    out = C.train_critic(critic_pairs(4), tiny_model_dir, tmp_path, cfg, device="cpu")
    from safetensors.torch import load_file
    weights = load_file(out / "adapter_model.safetensors")
    assert weights and all(v.dtype == torch.float32 for v in weights.values())
    # The per-step logs are kept beside the adapter: the stage's summary reads its first-pass fit from them.
    fit = critic_fit(out)
    assert set(fit) == {"late_reward_accuracy", "late_reward_margin"} and 0.0 <= fit["late_reward_accuracy"] <= 1.0
    assert (out / LOG_FILE).exists()
    model, tok = C.load_critic(out, "cpu")
    pair = critic_pairs(4)[0]
    good, bad = C.score_candidates(model, tok, pair["chosen"][:-1], [pair["chosen"][-1]["content"],
                                                                     pair["rejected"][-1]["content"]],
                                   pair["training_info"])
    assert good > bad


def test_actor_dpo_under_bf16_starts_at_log2_and_moves_toward_the_chosen(tiny_model_dir, tmp_path):
    """TRL's DPO on the CPU under bf16 autocast: at step 1 the zero-init LoRA is the reference, so the DPO term is
    log 2 up to bf16 rounding of the NLL term; after it the margin is positive."""
    from sweet.algos import actor as A
    from sweet.config import ActorConfig
    from tests.test_algos import Recorder, dialogue

    rows = [{"prompt": dialogue(1 + i % 3)[:-1], "chosen": "I WANT TO ANSWER: def add(a, b): return a + b",
             "rejected": "What types?"} for i in range(4)]
    cfg = ActorConfig(lr=1e-2, epochs=2, batch_size=4, save_steps=100, lora_r=4, lora_alpha=8, max_length=64)
    runs = {}
    for mode in ("fp32", "bf16"):
        precision.set_cpu_precision(mode)
        rec = Recorder()
        A.train_dpo(rows, tiny_model_dir, tmp_path / mode, cfg, callbacks=[rec])
        runs[mode] = [entry for entry in rec.logs if "loss" in entry]
    first, last = runs["bf16"][0], runs["bf16"][-1]
    assert first["rewards/margins"] == 0.0
    assert first["loss"] == pytest.approx(runs["fp32"][0]["loss"], abs=0.02)
    assert last["rewards/margins"] > 0


# --------------------------------------------------------------------------------------- one pair per forward
@pytest.mark.parametrize("stage", ["critic", "actor"])
def test_one_pair_per_forward_gives_the_update_of_a_two_pair_batch(tiny_model_dir, tmp_path, stage):
    """The laptop profile's batch_size 1 x grad_accum 2 (faster on the CPU) trains what batch_size 2 does: the same
    pairs in the same order, each optimiser step the mean of two pairs' gradients (the NLL term left out, whose token
    mean spans the batch)."""
    from safetensors.torch import load_file

    from sweet.algos import actor as A
    from sweet.config import ActorConfig
    from tests.test_algos import dialogue

    def train(batch_size: int, grad_accum: int, out):
        kw = dict(lr=1e-2, epochs=2, batch_size=batch_size, grad_accum=grad_accum, save_steps=100, lora_r=4,
                  lora_alpha=8, nll_coef=0.0, seed=3)
        if stage == "critic":
            return C.train_critic(critic_pairs(6), tiny_model_dir, out, CriticConfig(max_length=256, **kw))
        rows = [{"prompt": dialogue(1 + i % 3)[:-1], "chosen": f"I WANT TO ANSWER: def add(a, b): return a + {i}",
                 "rejected": f"What types, {i}?"} for i in range(6)]
        return A.train_dpo(rows, tiny_model_dir, out, ActorConfig(max_length=64, **kw))

    whole = load_file(train(2, 1, tmp_path / "whole") / "adapter_model.safetensors")
    split = load_file(train(1, 2, tmp_path / "split") / "adapter_model.safetensors")
    assert whole.keys() == split.keys()
    assert all(v.abs().sum() > 0 for k, v in whole.items() if "lora_B" in k)
    for k in whole:
        assert torch.allclose(whole[k], split[k], atol=1e-5, rtol=1e-4), k


def test_a_stages_precision_ends_with_the_stage(monkeypatch):
    """run_stage applies models.cpu_precision for the stage only: later library calls in the same process (another
    stage, a script, the next test) are back to float32."""
    monkeypatch.setattr(precision, "cpu_has_amx_bf16", lambda: True)
    with precision.cpu_precision("auto") as inside:
        assert inside == "bf16" and precision.cpu_bf16("cpu")
    assert not precision.cpu_bf16("cpu")


def test_first_pass_fit_reads_the_second_half_of_the_first_epoch():
    """Batches logged in epoch 1 had not been trained on yet; the second half says what the critic has learned.
    Steps of later epochs (seen data) and logs without the metric (the final summary) are left out."""
    log = [{"epoch": 0.25, "reward_accuracy": 0.0, "reward_margin": -1.0},
           {"epoch": 0.5, "reward_accuracy": 0.5, "reward_margin": 0.0},
           {"epoch": 0.75, "reward_accuracy": 1.0, "reward_margin": 1.0},
           {"epoch": 1.0, "reward_accuracy": 0.5, "reward_margin": 2.0},
           {"epoch": 1.5, "reward_accuracy": 1.0, "reward_margin": 9.0},
           {"epoch": 2.0, "train_loss": 0.3}]
    assert first_pass_fit(log, ("reward_accuracy", "reward_margin")) == {"late_reward_accuracy": 0.75,
                                                                        "late_reward_margin": 1.5}
    assert first_pass_fit([], ("reward_accuracy",)) == {} and first_pass_fit(log, ("nll",)) == {}
