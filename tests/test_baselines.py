"""RFT and multi-turn DPO baselines: assistant masks, trainer losses by hand, end-to-end training on a tiny Qwen2
(CPU). The pure losses are checked in test_losses.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoTokenizer

from sweet.algos import baselines as B
from sweet.algos import losses as L
from sweet.algos.dialogue import encode_all
from sweet.config import ActorConfig
from sweet.models import load_policy
from tests.test_algos import Recorder, dialogue, lora_b, save_tiny_qwen2, tokenizers_under_test

GOOD, BAD = "I WANT TO ANSWER: def add(a, b): return a + b", "I WANT TO ANSWER: def f(x): return x * 2"
CFG = dict(lr=1e-2, epochs=1, batch_size=2, save_steps=1, lora_r=4, lora_alpha=8, max_length=64)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2_baselines"))


def runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of consecutive masked tokens."""
    out, cur = [], []
    for t, m in zip(ids, mask, strict=True):
        if m:
            cur.append(t)
        elif cur:
            out, cur = out + [cur], []
    return out + [cur] if cur else out


def perturb(model, seed: int = 1) -> None:
    """A trained-looking adapter (LoRA B != 0), so pi_theta != pi_ref."""
    g = torch.Generator().manual_seed(seed)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5


def hand_token_logps(model, ids: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Per row, log p(ids[p] | ids[<p]) at each masked p, from the full logits of one plain forward per row."""
    out = []
    for row, m in zip(ids, mask, strict=True):
        n = int((row != -1).sum())
        logits = model(input_ids=row[None, :n]).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        out.append([lp[p - 1, row[p]].item() for p in range(1, n) if m[p]])
    return out


# ------------------------------------------------------------------------------------------------ masks
@pytest.mark.parametrize("make_tok", list(tokenizers_under_test()))
def test_masks_cover_exactly_the_assistant_turns(make_tok):
    """Masks = each assistant turn's content + its end-of-turn token `<|im_end|>` (no header, no user/system)."""
    tok = make_tok()
    chosen, rejected = dialogue(2, GOOD), dialogue(2, BAD)
    want = lambda msgs: [m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"]  # noqa: E731
    enc = B.encode_trajectory(tok, chosen, None)
    assert [tok.decode(r) for r in runs(enc["input_ids"], enc["assistant_masks"])] == want(chosen)
    assert len(want(chosen)) == 2
    short = rejected[:-2] + [{"role": "assistant", "content": "hm"}]  # one assistant turn, shorter: padded
    pair = B.encode_dpo_pair(tok, {"chosen": chosen, "rejected": short}, None)
    batch = B.collate_dpo([pair], tok.pad_token_id or 0)
    for row, msgs in enumerate([chosen, short]):
        ids, mask = batch["input_ids"][row].tolist(), batch["assistant_mask"][row].tolist()
        assert [tok.decode(r) for r in runs(ids, mask)] == want(msgs)
    lengths = [len(pair["chosen_ids"]), len(pair["rejected_ids"])]
    assert batch["attention_mask"].sum(-1).tolist() == lengths and lengths[1] < lengths[0]


# ------------------------------------------------------------------------------------ compute_loss by hand
def test_rft_trainer_loss_equals_hand_computation(tiny_model_dir, tmp_path):
    trajs = [{"messages": dialogue(2, GOOD)}, {"messages": dialogue(1, BAD)}]
    trainer, tok = B.rft_trainer(trajs, tiny_model_dir, tmp_path, ActorConfig(**CFG))
    perturb(trainer.model)
    rows = [trainer.train_dataset[i] for i in range(2)]
    batch = trainer.data_collator(rows)
    # TRL's labels mask exactly our assistant tokens.
    for t, row in zip(trajs, rows, strict=True):
        enc = B.encode_trajectory(tok, t["messages"], 64)
        assert row["input_ids"] == enc["input_ids"]
        assert [int(lbl != -100) for lbl in row["labels"]] == enc["assistant_masks"]
    loss = trainer.compute_loss(trainer.model, dict(batch)).item()
    ids = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -1)
    with torch.no_grad():
        lps = hand_token_logps(trainer.model, ids, batch["labels"] != -100)
    width = max(len(r) for r in lps)
    # TRL's SFT loss is `losses.sft_loss`: the mean NLL over every assistant token of the batch.
    want = L.sft_loss(torch.tensor([r + [0.0] * (width - len(r)) for r in lps]),
                      torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in lps]))
    flat = [x for r in lps for x in r]
    assert want.item() == pytest.approx(-sum(flat) / len(flat), rel=1e-6)
    assert loss == pytest.approx(want.item(), rel=1e-4)


def test_mt_dpo_trainer_loss_equals_hand_computation(tiny_model_dir, tmp_path):
    pairs = [{"chosen": dialogue(2, GOOD), "rejected": dialogue(3, BAD)},
             {"chosen": dialogue(1, GOOD), "rejected": dialogue(2, BAD)}]
    cfg = ActorConfig(**{**CFG, "max_length": 256}, beta=0.5, nll_coef=0.2)
    trainer, tok = B.mt_dpo_trainer(pairs, tiny_model_dir, tmp_path, cfg)
    model = trainer.model
    perturb(model)
    batch = trainer.data_collator(trainer.train_dataset)
    loss = trainer.compute_loss(model, batch).item()
    ids = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -1)
    with torch.no_grad():
        pol = hand_token_logps(model, ids, batch["assistant_mask"])
        with model.disable_adapter():
            ref = hand_token_logps(model, ids, batch["assistant_mask"])
    assert len(pol[2]) > len(pol[0])  # rejected of pair 0 has one more assistant turn, all of them counted
    terms = []
    for k in range(2):
        margin = (sum(pol[k]) - sum(ref[k])) - (sum(pol[k + 2]) - sum(ref[k + 2]))
        terms.append(math.log1p(math.exp(-cfg.beta * margin)))
    nll = -(sum(pol[0]) + sum(pol[1])) / (len(pol[0]) + len(pol[1]))
    assert abs(sum(pol[0]) - sum(ref[0])) > 0.1  # the perturbed adapter moves the policy away from pi_ref
    assert loss == pytest.approx(sum(terms) / 2 + cfg.nll_coef * nll, rel=1e-4)
    logged = trainer._metrics
    assert logged["rewards/chosen"][0] == pytest.approx(cfg.beta * (sum(pol[0]) - sum(ref[0]) + sum(pol[1])
                                                                    - sum(ref[1])) / 2, rel=1e-4)
    assert logged["nll"][0] == pytest.approx(nll, rel=1e-4)


# ---------------------------------------------------------------------------------------------- end to end
def rft_data() -> list[dict]:
    return [{"messages": dialogue(1 + i % 3, GOOD)} for i in range(4)]


def dpo_data() -> list[dict]:
    return [{"chosen": dialogue(1 + i % 2, GOOD), "rejected": dialogue(1 + (i + 1) % 3, BAD)} for i in range(4)]


@pytest.mark.parametrize("method", ["rft", "mt_dpo"])
def test_train_end_to_end_resume_and_rerun(tiny_model_dir, tmp_path, method):
    train, data = (B.train_rft, rft_data()) if method == "rft" else (B.train_mt_dpo, dpo_data())
    cfg = ActorConfig(**CFG)  # 4 rows, batch 2: 2 steps, a checkpoint after each
    with pytest.raises(KeyboardInterrupt):
        train(data, tiny_model_dir, tmp_path, cfg, callbacks=[Recorder(stop_at=2)])
    assert (tmp_path / "checkpoints/checkpoint-1").is_dir() and not (tmp_path / "actor").exists()
    rec = Recorder()
    out = train(data, tiny_model_dir, tmp_path, cfg, callbacks=[rec])
    assert out == tmp_path / "actor" and rec.steps == [2]  # resumed from checkpoint-1, not from scratch
    assert (tmp_path / "checkpoints/checkpoint-2").is_dir()
    losses = [entry["loss"] for entry in rec.logs if "loss" in entry]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)
    if method == "mt_dpo":
        keys = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "nll"}
        assert keys <= set(rec.logs[0])
    assert all(v.abs().sum() > 0 for v in lora_b(out).values())  # the adapter moved away from zero init
    meta = json.loads((out / "actor_config.json").read_text())
    assert meta["method"] == method and meta["lora_r"] == 4
    assert (out / "tokenizer_config.json").exists()
    again = Recorder()
    assert train(data, tiny_model_dir, tmp_path, cfg, callbacks=[again]) == out and again.steps == []  # early return
    policy = load_policy(tiny_model_dir, out, "cpu")
    assert not hasattr(policy, "peft_config")  # merged
    assert policy.generate(torch.tensor([[1, 5, 6]]), max_new_tokens=3, do_sample=False).shape == (1, 6)


def test_too_long_dialogues_are_shortened_or_skipped(tiny_model_dir, caplog):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    msgs = dialogue(4, GOOD)
    full = len(B.encode_trajectory(tok, msgs, None)["input_ids"])
    short = B.encode_trajectory(tok, msgs, full - 1)
    assert len(short["input_ids"]) < full and sum(short["assistant_masks"]) > 0
    huge = [{"messages": dialogue(1, GOOD * 20)}, {"messages": dialogue(2, GOOD)}]
    rows = encode_all(huge, lambda t: B.encode_trajectory(tok, t["messages"], 64), "train_rft", 64)
    assert len(rows) == 1 and "skipped 1/2" in caplog.text
    with pytest.raises(ValueError, match="no usable items"):
        encode_all(huge[:1], lambda t: B.encode_trajectory(tok, t["messages"], 64), "train_rft", 64)


@pytest.mark.parametrize("method, data, err, match", [
    ("rft", [], ValueError, "non-empty list"),
    ("rft", [{"msgs": []}], KeyError, "missing \\['messages'\\]"),
    ("rft", [{"messages": [{"role": "assistant", "content": "hi"}]}], ValueError, "must be a user message"),
    ("rft", [{"messages": dialogue(1)[:-1]}], ValueError, "no assistant turn"),
    ("rft", [{"messages": [{"role": "user"}]}], ValueError, "string 'role' and 'content'"),
    ("mt_dpo", [], ValueError, "non-empty list"),
    ("mt_dpo", [{"chosen": dialogue(1)}], KeyError, "missing \\['rejected'\\]"),
    ("mt_dpo", [{"chosen": dialogue(1), "rejected": [dict(m, content=m["content"] + "!") for m in dialogue(1)]}],
     ValueError, "same task"),
    ("rft", [{"messages": dialogue(1, GOOD * 40)}], ValueError, "no usable items"),
])
def test_bad_input_gets_one_clear_error(tiny_model_dir, tmp_path, method, data, err, match):
    train = B.train_rft if method == "rft" else B.train_mt_dpo
    with pytest.raises(err, match=match):
        train(data, tiny_model_dir, tmp_path, ActorConfig(**CFG))
    assert not (tmp_path / "actor").exists()
