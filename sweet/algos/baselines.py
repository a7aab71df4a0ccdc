"""Baselines of the SWEET-RL paper (Table 2): rejection fine-tuning (RFT) and multi-turn DPO (MT-DPO).

Both train a LoRA on the base LM and write it exactly like `train_actor` (`out_dir/actor` adapter + tokenizer +
`actor_config.json`, here with a `"method"` key), so `sweet.algos.actor.load_policy` loads either.
Assistant tokens = every assistant turn's content tokens plus its end-of-turn token (`<|im_end|>`), never the
`<|im_start|>assistant\\n` header, nor system/user tokens (see `sweet.algos.dialogue`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from datasets import Dataset
from peft import get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from sweet.algos.critic import nll_loss, token_logps
from sweet.algos.dialogue import DialogueTooLong, fit_dialogue
from sweet.algos.training import lora_config, model_dtype, save_trained, training_kwargs
from sweet.config import ActorConfig

log = logging.getLogger(__name__)
Messages = list[dict[str, str]]


# ----------------------------------------------------------------------------------------------- losses (pure)
def sft_loss(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RFT loss: mean NLL over ALL assistant tokens of the batch, -sum(mask * log p) / sum(mask) (TRL SFT's
    per-token mean; a long trajectory weighs more than a short one). token_logp, mask: [B, T]."""
    return nll_loss(token_logp, mask)


def trajectory_logps(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(tau) = sum of the log-probs of every assistant token of every turn of tau (user tokens masked). [B]."""
    return (token_logp * mask).sum(-1)


def mt_dpo_loss(pol_chosen: torch.Tensor, pol_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Trajectory-level DPO: -log sigma(beta [(log pi(tau+) - log pi_ref(tau+)) - (log pi(tau-) - log pi_ref(tau-))]),
    mean over pairs. Inputs: trajectory log-probs [B]. Returns (loss, chosen rewards, rejected rewards), where a
    reward is beta * (log pi - log pi_ref) as TRL logs it."""
    chosen, rejected = beta * (pol_chosen - ref_chosen), beta * (pol_rejected - ref_rejected)
    return -F.logsigmoid(chosen - rejected).mean(), chosen.detach(), rejected.detach()


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


def _encode_all(items: list, encode, name: str, max_length: int) -> list[dict]:
    rows, skipped = [], 0
    for item in items:
        try:
            rows.append(encode(item))
        except DialogueTooLong:
            skipped += 1
    if skipped:
        log.warning("%s: skipped %d/%d items longer than max_length=%d", name, skipped, len(items), max_length)
    if not rows:
        raise ValueError(f"{name}: no usable items ({len(items)} given, {skipped} longer than max_length={max_length})")
    return rows


def _setup(items, name: str, keys: tuple[str, ...], base_model: str):
    if not isinstance(items, list) or not items:
        raise ValueError(f"{name}: expected a non-empty list, got {items!r:.80}")
    for i, it in enumerate(items):
        missing = [k for k in keys if not isinstance(it, dict) or k not in it]
        if missing:
            raise KeyError(f"{name}: item {i} is missing {missing} (expects {list(keys)})")
    if Path(base_model).is_dir():  # absolute, so the adapter config names a base that loads from any cwd
        base_model = str(Path(base_model).resolve())
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return base_model, tokenizer


def _lora_model(base_model: str, cfg: ActorConfig):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    transformers.set_seed(cfg.seed)  # LoRA A init happens before Trainer seeds anything
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=model_dtype(device))
    return get_peft_model(model, lora_config(cfg.lora_r, cfg.lora_alpha))


def _train_and_save(trainer, tokenizer, out_dir: Path, cfg: ActorConfig, method: str) -> Path:
    ckpt_dir, final = Path(trainer.args.output_dir), out_dir / "actor"
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    save_trained(trainer, final, tokenizer, lambda: (final / "actor_config.json").write_text(
        json.dumps({**cfg.model_dump(), "method": method}, indent=1)))
    return final


# ---------------------------------------------------------------------------------------------------- RFT
def rft_trainer(trajectories: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=()):
    """(SFTTrainer, tokenizer) for RFT: pre-tokenized rows with `assistant_masks`, so TRL masks all other tokens."""
    base_model, tokenizer = _setup(trajectories, "train_rft", ("messages",), base_model)
    for i, t in enumerate(trajectories):
        _check_messages(t["messages"], f"train_rft: trajectory {i}")
    rows = _encode_all(trajectories, lambda t: encode_trajectory(tokenizer, t["messages"], cfg.max_length),
                       "train_rft", cfg.max_length)
    args = SFTConfig(**training_kwargs(cfg, Path(out_dir) / "checkpoints"), max_length=cfg.max_length,
                     packing=False, padding_free=False, loss_type="nll")
    trainer = SFTTrainer(model=_lora_model(base_model, cfg), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, callbacks=list(callbacks))
    return trainer, tokenizer


def train_rft(trajectories: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=()) -> Path:
    """Baseline 'rejection fine-tuning': SFT on the given (successful) trajectories, assistant tokens only, LoRA.

    trajectories: `{"messages": [...]}`, first message (after an optional system one) a user message.
    Returns `out_dir/actor`; returns at once when that adapter already exists.
    """
    out_dir = Path(out_dir)
    if (out_dir / "actor" / "adapter_config.json").exists():
        return out_dir / "actor"  # content-addressed output already complete
    trainer, tokenizer = rft_trainer(trajectories, base_model, out_dir, cfg, callbacks)
    return _train_and_save(trainer, tokenizer, out_dir, cfg, "rft")


# ------------------------------------------------------------------------------------------------- MT-DPO
def _task(messages: Messages) -> Messages:
    return messages[: 2 if messages[0]["role"] == "system" else 1]


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
    width = max(len(i) for i in ids)
    pad = lambda rs, v: torch.tensor([r + [v] * (width - len(r)) for r in rs], dtype=torch.long)  # noqa: E731
    return {"input_ids": pad(ids, pad_id), "assistant_mask": pad(masks, 0),
            "attention_mask": pad([[1] * len(i) for i in ids], 0)}


class MultiTurnDPOTrainer(Trainer):
    """Trainer whose loss is `mt_dpo_loss` + nll_coef * mean NLL of tau+; pi_ref = same model, adapter disabled."""

    loss_is_scaled_for_ga = False  # our loss is a per-batch mean: let Trainer divide by grad_accum itself

    def __init__(self, *args, beta: float, nll_coef: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta, self.nll_coef = beta, nll_coef
        self._metrics: dict[str, list[float]] = {}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Forward through `model` (it may be wrapped for DDP/FSDP/DeepSpeed); the adapter switch is on what it wraps.
        ids, attn, mask = inputs["input_ids"], inputs["attention_mask"], inputs["assistant_mask"]
        logp = token_logps(model, ids, attn, mask)
        with torch.no_grad(), self.accelerator.unwrap_model(model).disable_adapter():
            ref = token_logps(model, ids, attn, mask)
        pol_seq, ref_seq, b = trajectory_logps(logp, mask), trajectory_logps(ref, mask), ids.shape[0] // 2
        dpo, r_c, r_r = mt_dpo_loss(pol_seq[:b], pol_seq[b:], ref_seq[:b], ref_seq[b:], self.beta)
        nll = sft_loss(logp[:b], mask[:b])
        loss = dpo + self.nll_coef * nll
        for k, v in {"dpo_loss": dpo.item(), "nll": nll.item(), "rewards/chosen": r_c.mean().item(),
                     "rewards/rejected": r_r.mean().item(), "rewards/accuracies": (r_c > r_r).float().mean().item(),
                     "rewards/margins": (r_c - r_r).mean().item(), "logps/chosen": pol_seq[:b].mean().item(),
                     "logps/rejected": pol_seq[b:].mean().item()}.items():
            self._metrics.setdefault(k, []).append(v)
        return (loss, {"rewards_chosen": r_c, "rewards_rejected": r_r}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._metrics and "loss" in logs:  # training logs only: average what accumulated since the last log
            logs.update({k: sum(v) / len(v) for k, v in self._metrics.items()})
            self._metrics.clear()
        super().log(logs, start_time)


def mt_dpo_trainer(pairs: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=()):
    """(MultiTurnDPOTrainer, tokenizer) for MT-DPO on `{"chosen": messages, "rejected": messages}` pairs."""
    base_model, tokenizer = _setup(pairs, "train_mt_dpo", ("chosen", "rejected"), base_model)
    for i, p in enumerate(pairs):
        _check_pair(p, f"train_mt_dpo: pair {i}")
    rows = _encode_all(pairs, lambda p: encode_dpo_pair(tokenizer, p, cfg.max_length), "train_mt_dpo",
                       cfg.max_length)
    args = TrainingArguments(**training_kwargs(cfg, Path(out_dir) / "checkpoints"))
    trainer = MultiTurnDPOTrainer(model=_lora_model(base_model, cfg), args=args, train_dataset=rows,
                                  data_collator=lambda b: collate_dpo(b, tokenizer.pad_token_id),
                                  callbacks=list(callbacks), beta=cfg.beta, nll_coef=cfg.nll_coef)
    return trainer, tokenizer


def train_mt_dpo(pairs: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=()) -> Path:
    """Baseline 'multi-turn DPO': trajectory-level DPO (beta) + NLL on tau+ over all assistant turns, LoRA.

    pairs: `{"chosen": messages, "rejected": messages}` of the same task. Returns `out_dir/actor`; returns at once
    when that adapter already exists.
    """
    out_dir = Path(out_dir)
    if (out_dir / "actor" / "adapter_config.json").exists():
        return out_dir / "actor"  # content-addressed output already complete
    trainer, tokenizer = mt_dpo_trainer(pairs, base_model, out_dir, cfg, callbacks)
    return _train_and_save(trainer, tokenizer, out_dir, cfg, "mt_dpo")
