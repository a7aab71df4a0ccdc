"""SWEET-RL actor: pick (chosen, rejected) candidate actions by critic score, then DPO + NLL on turn-level pairs."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import torch
import transformers
from datasets import Dataset
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint
from trl import DPOConfig, DPOTrainer

from sweet.algos.training import lora_config, model_dtype, resolve_device, save_trained, training_kwargs
from sweet.algos.dialogue import DialogueTooLong, fit_dialogue
from sweet.config import ActorConfig

log = logging.getLogger(__name__)


def select_pairs(scored: list[dict], k: int, rng: random.Random) -> list[tuple[dict, dict]]:
    """Paper Sec. 4.2: chosen = a random candidate of the top 50% by critic score, rejected = one of the bottom 50%.

    Returns up to `k` distinct (chosen, rejected) pairs of the input dicts; deterministic given `rng`'s state.
    Pairs of identical text are skipped (no DPO signal).
    """
    ranked = sorted(scored, key=lambda d: -d["score"])  # stable: ties keep input order, so the result is reproducible
    half = len(ranked) // 2
    if half == 0:
        return []
    top, bottom = ranked[:half], ranked[-half:]
    combos = [(c, r) for c in top for r in bottom if c["candidate"] != r["candidate"]]
    return rng.sample(combos, min(k, len(combos)))


def fit_prompt(tokenizer, prompt: list[dict], chosen: str, rejected: str, max_length: int) -> list[dict]:
    """Drop the oldest exchanges (after system + problem) so prompt + the longer completion fits `max_length`.

    TRL's DPO truncation keeps the start of a sequence, which would cut the completion we train on.
    """
    longer = max(chosen, rejected, key=lambda c: len(tokenizer(c, add_special_tokens=False)["input_ids"]))
    kept, _ = fit_dialogue(tokenizer, prompt + [{"role": "assistant", "content": longer}], max_length)
    return kept[:-1]


def build_dpo_dataset(tokenizer, rows: list[dict], max_length: int) -> Dataset:
    """TRL conversational preference format: `prompt` = messages, `chosen`/`rejected` = one assistant message."""
    data, skipped = [], 0
    for i, row in enumerate(rows):
        missing = {"prompt", "chosen", "rejected"} - set(row)
        if missing:
            raise KeyError(f"actor row {i} is missing {sorted(missing)} (expects prompt, chosen, rejected)")
        if not row["prompt"] or row["prompt"][-1]["role"] != "user":
            raise ValueError(f"actor row {i}: the prompt must end with a user message")
        try:
            prompt = fit_prompt(tokenizer, row["prompt"], row["chosen"], row["rejected"], max_length)
        except DialogueTooLong:
            skipped += 1
            continue
        data.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": row["chosen"]}],
                     "rejected": [{"role": "assistant", "content": row["rejected"]}]})
    if skipped:
        log.warning("train_actor: skipped %d/%d rows longer than max_length=%d", skipped, len(rows), max_length)
    if not data:
        raise ValueError(f"train_actor: no usable rows ({len(rows)} given, {skipped} too long)")
    return Dataset.from_list(data)


def train_actor(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=()) -> Path:
    """Stage 'train DPO actor': DPO (beta) + NLL on the chosen action, LoRA, reference = adapter disabled."""
    out_dir, final = Path(out_dir), Path(out_dir) / "actor"
    if (final / "adapter_config.json").exists():
        return final  # content-addressed output already complete
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = build_dpo_dataset(tokenizer, rows, cfg.max_length)
    # No rpo_alpha in TRL 1.16: the "sft" loss term is the chosen completion's mean token NLL.
    losses = (["sigmoid", "sft"], [1.0, cfg.nll_coef]) if cfg.nll_coef > 0 else (["sigmoid"], [1.0])
    ckpt_dir = out_dir / "checkpoints"
    args = DPOConfig(**training_kwargs(cfg, ckpt_dir), beta=cfg.beta, loss_type=losses[0], loss_weights=losses[1],
                     max_length=cfg.max_length)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    transformers.set_seed(cfg.seed)  # LoRA A init happens before Trainer seeds anything
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=model_dtype(device))
    trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=lora_config(cfg.lora_r, cfg.lora_alpha), callbacks=list(callbacks))
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    save_trained(trainer, final, tokenizer,
                 lambda: (final / "actor_config.json").write_text(json.dumps(cfg.model_dump(), indent=1)))
    return final


def load_policy(base_model: str, adapter_dir: str | Path | None = None, device: str = "auto"):
    """Model for generation: the base, with the actor's LoRA merged in (no adapter overhead per token)."""
    device = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=model_dtype(device))
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    return model.to(device).eval()
