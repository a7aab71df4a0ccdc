"""SWEET-RL actor: pick (chosen, rejected) candidate actions by critic score, then DPO + NLL on turn-level pairs
(`losses.dpo_nll_loss`, run by TRL's DPOTrainer)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig, DPOTrainer

from sweet.algos.dialogue import encode_all, fit_dialogue
from sweet.algos.training import (checkpoint_dir, load_base_model, local_model_path, lora_config, run_training,
                                  training_kwargs)
from sweet.config import ActorConfig

DONE_FILE = "actor_config.json"  # written last into `out_dir/actor` (by every actor method): the output is complete


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


def dpo_row(tokenizer, i: int, row: dict, max_length: int) -> dict:
    """Row `i` in TRL's conversational preference format: `prompt` = messages (shortened by `fit_prompt`),
    `chosen`/`rejected` = one assistant message each."""
    missing = {"prompt", "chosen", "rejected"} - set(row)
    if missing:
        raise KeyError(f"actor row {i} is missing {sorted(missing)} (expects prompt, chosen, rejected)")
    if not row["prompt"] or row["prompt"][-1]["role"] != "user":
        raise ValueError(f"actor row {i}: the prompt must end with a user message")
    prompt = fit_prompt(tokenizer, row["prompt"], row["chosen"], row["rejected"], max_length)
    return {"prompt": prompt, "chosen": [{"role": "assistant", "content": row["chosen"]}],
            "rejected": [{"role": "assistant", "content": row["rejected"]}]}


def build_dpo_dataset(tokenizer, rows: list[dict], max_length: int) -> Dataset:
    """The rows as TRL's DPOTrainer reads them (`dpo_row`); rows too long even when shortened are skipped."""
    data = encode_all(list(enumerate(rows)), lambda ir: dpo_row(tokenizer, *ir, max_length), "train_dpo",
                      max_length, "rows")
    return Dataset.from_list(data)


def dpo_trainer(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                device: str = "auto"):
    """(DPOTrainer, tokenizer) for the SWEET-RL actor: `losses.dpo_nll_loss` (Eq. 4's DPO with beta, plus nll_coef
    times the chosen action's mean token NLL) as TRL computes it, on a LoRA whose reference is the adapter disabled."""
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = build_dpo_dataset(tokenizer, rows, cfg.max_length)
    # No rpo_alpha in TRL 1.16: the "sft" loss term is the chosen completion's mean token NLL.
    losses = (["sigmoid", "sft"], [1.0, cfg.nll_coef]) if cfg.nll_coef > 0 else (["sigmoid"], [1.0])
    args = DPOConfig(**training_kwargs(cfg, checkpoint_dir(out_dir), device), beta=cfg.beta, loss_type=losses[0],
                     loss_weights=losses[1], max_length=cfg.max_length)
    model = load_base_model(base_model, cfg.seed, device)  # TRL adds the LoRA (peft_config) after this seeding
    trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=lora_config(cfg.lora_r, cfg.lora_alpha), callbacks=list(callbacks))
    return trainer, tokenizer


def train_dpo(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
              device: str = "auto") -> Path:
    """Stage 'train DPO actor': DPO (beta) + NLL on the chosen action, LoRA, reference = adapter disabled; returns
    `out_dir/actor` (adapter + tokenizer + actor_config.json, which `sweet.models.load_policy` loads)."""
    final = Path(out_dir) / "actor"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    trainer, tokenizer = dpo_trainer(rows, local_model_path(base_model), out_dir, cfg, callbacks, device)
    return run_training(trainer, final, tokenizer, lambda: write_actor_config(final, cfg))


def write_actor_config(final: Path, cfg: ActorConfig, **extra) -> None:
    """actor_config.json (the `DONE_FILE` of every actor method): the training config, plus e.g. a baseline's
    `method`."""
    (final / DONE_FILE).write_text(json.dumps({**cfg.model_dump(), **extra}, indent=1))
