"""Baselines of the SWEET-RL paper (Table 2): rejection fine-tuning (RFT) and multi-turn DPO (MT-DPO).

Both train a LoRA on the base LM (or the whole model, `cfg.lora=False`: MT-DPO's reference is then a frozen copy of
the initial weights) and write it exactly like `actor.train_dpo` (`out_dir/actor` + tokenizer + `actor_config.json`,
here with a `"method"` key), so `sweet.models.load_policy` loads either. Their losses are
`losses.sft_loss` (run by TRL's SFTTrainer) and `losses.mt_dpo_loss` + `losses.nll_loss`.
Assistant tokens = every assistant turn's content tokens plus its end-of-turn token (`<|im_end|>`), never the
`<|im_start|>assistant\\n` header, nor system/user tokens (see `sweet.algos.dialogue`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainingArguments
from trl import SFTConfig, SFTTrainer

from sweet.algos.actor import DONE_FILE, write_actor_config
from sweet.algos.critic import token_logps
from sweet.algos.dialogue import encode_all, fit_dialogue, mask_from_lengths, pad_rows
from sweet.algos.losses import mt_dpo_loss, nll_loss, trajectory_logps
from sweet.algos.training import (LossTrainer, checkpoint_dir, local_model_path, run_training, trainable_model,
                                  training_kwargs)
from sweet.chat import prompt_length
from sweet.config import ActorConfig

Messages = list[dict[str, str]]


# ------------------------------------------------------------------------------------------------ encoding
def _check_messages(messages, what: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{what}: expected a non-empty list of messages, got {type(messages).__name__}")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"{what}: message {k} must be a dict with string 'role' and 'content'")
    first = messages[1] if messages[0]["role"] == "system" and len(messages) > 1 else messages[0]
    if first["role"] != "user":
        raise ValueError(f"{what}: the first message (after an optional system message) must be a user message")
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError(f"{what}: has no assistant turn to train on")


def encode_trajectory(tokenizer, messages: Messages, max_length: int | None) -> dict:
    """Messages -> `input_ids` + `assistant_masks` (1 on every assistant turn's content + end-of-turn tokens).

    Too long: the oldest exchanges are dropped (`fit_dialogue`); raises `DialogueTooLong` if it still does not fit.
    """
    _, tok = fit_dialogue(tokenizer, messages, max_length)
    mask = [0] * len(tok["input_ids"])
    for s, e in tok["turn_spans"]:
        mask[s:e] = [1] * (e - s)
    return {"input_ids": tok["input_ids"], "assistant_masks": mask}


def _setup(items, name: str, keys: tuple[str, ...], base_model: str):
    if not isinstance(items, list) or not items:
        raise ValueError(f"{name}: expected a non-empty list, got {items!r:.80}")
    for i, it in enumerate(items):
        missing = [k for k in keys if not isinstance(it, dict) or k not in it]
        if missing:
            raise KeyError(f"{name}: item {i} is missing {missing} (expects {list(keys)})")
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ---------------------------------------------------------------------------------------------------- RFT
def rft_trainer(trajectories: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                device: str = "auto"):
    """(SFTTrainer, tokenizer) for RFT: pre-tokenized rows with `assistant_masks`, so TRL masks all other tokens and
    optimises `losses.sft_loss`."""
    tokenizer = _setup(trajectories, "train_rft", ("messages",), base_model)
    for i, t in enumerate(trajectories):
        _check_messages(t["messages"], f"train_rft: trajectory {i}")
    rows = encode_all(trajectories, lambda t: encode_trajectory(tokenizer, t["messages"], cfg.max_length),
                      "train_rft", cfg.max_length)
    args = SFTConfig(**training_kwargs(cfg, checkpoint_dir(out_dir), device), max_length=cfg.max_length,
                     packing=False, padding_free=False, loss_type="nll")
    model, _ = trainable_model(base_model, cfg, device, reference=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         callbacks=list(callbacks))
    return trainer, tokenizer


def train_rft(trajectories: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
              device: str = "auto") -> Path:
    """Baseline 'rejection fine-tuning': SFT on the given (successful) trajectories, assistant tokens only.

    trajectories: `{"messages": [...]}`, first message (after an optional system one) a user message.
    Returns `out_dir/actor`; returns at once when that output is already complete.
    """
    final = Path(out_dir) / "actor"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    trainer, tokenizer = rft_trainer(trajectories, local_model_path(base_model), out_dir, cfg, callbacks, device)
    return run_training(trainer, final, tokenizer, lambda: write_actor_config(final, cfg, method="rft"))


# ------------------------------------------------------------------------------------------------- MT-DPO
def _task(messages: Messages) -> Messages:
    return messages[:prompt_length(messages)]


def _check_pair(pair: dict, what: str) -> None:
    for side in ("chosen", "rejected"):
        _check_messages(pair[side], f"{what} {side}")
    if _task(pair["chosen"]) != _task(pair["rejected"]):
        raise ValueError(f"{what}: chosen and rejected must start with the same task (system + first user message)")


def encode_dpo_pair(tokenizer, pair: dict, max_length: int | None) -> dict:
    """Pair of whole trajectories -> token ids + assistant masks for each side (each fitted to `max_length`)."""
    out = {}
    for side in ("chosen", "rejected"):
        enc = encode_trajectory(tokenizer, pair[side], max_length)
        out[f"{side}_ids"], out[f"{side}_mask"] = enc["input_ids"], enc["assistant_masks"]
    return out


def collate_dpo(rows: list[dict], pad_id: int) -> dict:
    """Chosen rows first, then rejected, right-padded together; attention mask from lengths (pad may equal eos)."""
    ids = [r["chosen_ids"] for r in rows] + [r["rejected_ids"] for r in rows]
    masks = [r["chosen_mask"] for r in rows] + [r["rejected_mask"] for r in rows]
    return {"input_ids": pad_rows(ids, pad_id), "assistant_mask": pad_rows(masks, 0),
            "attention_mask": mask_from_lengths([len(i) for i in ids])}


class MultiTurnDPOTrainer(LossTrainer):
    """Trainer whose loss is `losses.mt_dpo_loss` + nll_coef * `losses.nll_loss` of tau+'s assistant tokens;
    pi_ref = same model, adapter disabled (or the frozen copy under full fine-tuning)."""

    def __init__(self, *args, beta: float, nll_coef: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta, self.nll_coef = beta, nll_coef

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        m, switch = self.policy_and_reference(model)
        ids, attn, mask = inputs["input_ids"], inputs["attention_mask"], inputs["assistant_mask"]
        logp = token_logps(m, ids, attn, mask)
        with torch.no_grad(), switch.disable_adapter():
            ref = token_logps(m, ids, attn, mask)
        pol_seq, ref_seq, b = trajectory_logps(logp, mask), trajectory_logps(ref, mask), ids.shape[0] // 2
        dpo, r_c, r_r = mt_dpo_loss(pol_seq[:b], pol_seq[b:], ref_seq[:b], ref_seq[b:], self.beta)
        nll = nll_loss(logp[:b], mask[:b])
        loss = dpo + self.nll_coef * nll
        self.record({"dpo_loss": dpo.item(), "nll": nll.item(), "rewards/chosen": r_c.mean().item(),
                     "rewards/rejected": r_r.mean().item(), "rewards/accuracies": (r_c > r_r).float().mean().item(),
                     "rewards/margins": (r_c - r_r).mean().item(), "logps/chosen": pol_seq[:b].mean().item(),
                     "logps/rejected": pol_seq[b:].mean().item()})
        return (loss, {"rewards_chosen": r_c, "rewards_rejected": r_r}) if return_outputs else loss


def mt_dpo_trainer(pairs: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                   device: str = "auto"):
    """(MultiTurnDPOTrainer, tokenizer) for MT-DPO on `{"chosen": messages, "rejected": messages}` pairs."""
    tokenizer = _setup(pairs, "train_mt_dpo", ("chosen", "rejected"), base_model)
    for i, p in enumerate(pairs):
        _check_pair(p, f"train_mt_dpo: pair {i}")
    rows = encode_all(pairs, lambda p: encode_dpo_pair(tokenizer, p, cfg.max_length), "train_mt_dpo",
                      cfg.max_length)
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    model, ref = trainable_model(base_model, cfg, device)
    trainer = MultiTurnDPOTrainer(model=model, args=args, train_dataset=rows, ref_model=ref,
                                  data_collator=lambda b: collate_dpo(b, tokenizer.pad_token_id),
                                  callbacks=list(callbacks), beta=cfg.beta, nll_coef=cfg.nll_coef)
    return trainer, tokenizer


def train_mt_dpo(pairs: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                 device: str = "auto") -> Path:
    """Baseline 'multi-turn DPO': trajectory-level DPO (beta) + NLL on tau+ over all assistant turns.

    pairs: `{"chosen": messages, "rejected": messages}` of the same task. Returns `out_dir/actor`; returns at once
    when that output is already complete.
    """
    final = Path(out_dir) / "actor"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    trainer, tokenizer = mt_dpo_trainer(pairs, local_model_path(base_model), out_dir, cfg, callbacks, device)
    return run_training(trainer, final, tokenizer, lambda: write_actor_config(final, cfg, method="mt_dpo"))
