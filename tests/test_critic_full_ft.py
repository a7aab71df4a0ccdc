"""LM-head critic with full fine-tuning (`lora=False`): a frozen copy of the initial model is the reference."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments

from sweet.algos import critic as C
from sweet.algos import scoring as S
from sweet.algos.training import training_kwargs
from sweet.config import CriticConfig
from tests.test_algos import CANDS, Recorder, critic_pairs, dialogue, save_tiny_qwen2

INFO = "def add(a, b):\n    return a + b"


class FullFTConfig(CriticConfig):
    """Stands for CriticConfig(lora=False) whether or not CriticConfig declares `lora` yet."""
    lora: bool = False


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2_fullft"))


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_trainer_moves_every_weight_and_keeps_the_reference_frozen(tiny_dir, tmp_path):
    cfg = FullFTConfig(lr=1e-2, epochs=1, batch_size=2, max_length=256)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    rows = [C.encode_pair(tok, p, cfg) for p in critic_pairs(4)]
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    ref = copy.deepcopy(model)
    before = state(model)
    args = TrainingArguments(**dict(training_kwargs(cfg, tmp_path), save_strategy="no"))
    rec = Recorder()
    trainer = C.CriticTrainer(model=model, args=args, train_dataset=rows, critic_cfg=cfg, ref_model=ref,
                              data_collator=lambda b: C.collate_pairs(b, tok.pad_token_id), callbacks=[rec])
    trainer.train()
    assert rec.steps == [1, 2]
    assert all(not p.requires_grad for p in ref.parameters())
    assert all(torch.equal(v, before[k]) for k, v in state(ref).items())  # reference untouched
    after = state(model)
    assert all(not torch.equal(after[k], before[k]) for k in before)  # no LoRA: every weight tensor trained
    # Critic == reference at the first step: advantages 0, BT loss log 2 (as with a zero-init LoRA).
    assert rec.logs[0]["bt_loss"] == pytest.approx(math.log(2), abs=1e-6)


def test_untrained_full_ft_critic_scores_zero(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    critic = C.FullFTModel(model, copy.deepcopy(model))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert C.score_candidates(critic, tok, dialogue(2)[:-1], CANDS, INFO) == [0.0] * len(CANDS)


def test_train_critic_full_ft_resumes_saves_and_round_trips(tiny_dir, tmp_path):
    cfg = FullFTConfig(lr=1e-2, epochs=1, batch_size=2, save_steps=1, max_length=256)
    pairs = critic_pairs(4)  # 2 steps
    with pytest.raises(KeyboardInterrupt):  # crash in step 2: resume from checkpoint-1 (a full-model checkpoint)
        C.train_critic(pairs, tiny_dir, tmp_path, cfg, callbacks=[Recorder(stop_at=2)])
    rec = Recorder()
    out = C.train_critic(pairs, tiny_dir, tmp_path, cfg, callbacks=[rec])
    assert rec.steps == [2] and out == tmp_path / "critic"
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    conf = json.loads((out / "critic_config.json").read_text())
    assert conf["lora"] is False and conf["head"] == "lm" and conf["base_model"] == tiny_dir
    model, tok = C.load_critic(out, "cpu")
    assert isinstance(model, C.FullFTModel)
    base = state(AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32))
    assert all(torch.equal(v, base[k]) for k, v in state(model.reference).items())  # reference = initial weights
    hist = pairs[0]["chosen"][:-1]
    cands = CANDS + [pairs[0]["chosen"][-1]["content"], pairs[0]["rejected"][-1]["content"]]
    fast = C.score_candidates(model, tok, hist, cands, INFO)
    slow = C.score_candidates(model, tok, hist, cands, INFO, shared_prefix=False)
    assert all(math.isfinite(s) and s != 0.0 for s in fast)  # trained: critic != reference
    assert max(abs(a - b) for a, b in zip(fast, slow)) < 1e-4
    crit = S.load_any_critic(out, "cpu")
    assert crit.kind == "lm" and S.score_any(crit, hist, cands, INFO) == fast
    assert C.train_critic(pairs, tiny_dir, tmp_path, cfg) == out  # finished output is reused, not retrained
