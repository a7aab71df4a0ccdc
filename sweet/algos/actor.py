"""SWEET-RL actor: pick (chosen, rejected) candidate actions by critic score, then DPO + NLL on turn-level pairs:
`losses.dpo_nll_loss` run by TRL's DPOTrainer (`nll_scope='action'`), or, as the released actor run, the NLL over the
whole chosen sequence (`nll_scope='sequence'`, `SequenceNLLTrainer`). A LoRA (reference = adapter disabled) or the
whole model against a frozen copy of its initial weights (`cfg.lora=False`, the paper's full fine-tuning)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainingArguments
from trl import DPOConfig, DPOTrainer

from sweet.algos.critic import token_logps
from sweet.algos.dialogue import encode_all, fit_dialogue, mask_from_lengths, pad_rows, tokenize_dialogue
from sweet.algos.losses import dpo_loss, sequence_nll_loss, trajectory_logps
from sweet.algos.training import (LossTrainer, checkpoint_dir, local_model_path, lora_config, run_training,
                                  trainable_model, training_kwargs)
from sweet.colbench.backend import ANSWER_MARK, extract_answer, parses
from sweet.config import ActorConfig

DONE_FILE = "actor_config.json"  # written last into `out_dir/actor` (by every actor method): the output is complete


def select_pairs(scored: list[dict], k: int, rng: random.Random, never_chosen=None) -> list[tuple[dict, dict]]:
    """Paper Sec. 4.2: chosen = a random candidate of the top 50% by critic score, rejected = one of the bottom 50%.

    Returns up to `k` distinct (chosen, rejected) pairs of the input dicts; deterministic given `rng`'s state.
    Pairs of identical text are skipped (no DPO signal). `never_chosen(d)` true (a project rule, off by default:
    `candidates.unmarked_code`) ranks `d` below every other candidate: it may be rejected, never chosen.
    """
    demoted = (lambda d: bool(never_chosen(d))) if never_chosen else (lambda d: False)
    # stable: ties keep input order, so the result is reproducible
    ranked = sorted(scored, key=lambda d: (demoted(d), -d["score"]))
    half = len(ranked) // 2
    if half == 0:
        return []
    top, bottom = [d for d in ranked[:half] if not demoted(d)], ranked[-half:]
    combos = [(c, r) for c in top for r in bottom if c["candidate"] != r["candidate"]]
    return rng.sample(combos, min(k, len(combos)))


_FUNCTION_DEF = re.compile(r"^\s*def\s+\w+\s*\(", re.M)


def unmarked_code(candidate: str) -> bool:
    """A message holding a function definition without the answer marker. Before the last turn the backend
    environment reads it as a question (the dialogue goes on), though it asks for nothing: run K2's actor learned
    this form from critic-ranked pairs (a question's form over a whole function; README, *Run K2*)."""
    return bool(_FUNCTION_DEF.search(candidate)) and ANSWER_MARK.lower() not in candidate.lower()


def unparsed_answer(candidate: str) -> bool:
    """A message with the answer marker whose answer is not a function that parses: before the last turn the
    environment ends the episode on it and it scores 0. Run M's actor learned `I WANT TO ANSWER: <a question>` in 21
    of 50 held-out episodes (README, *Run M*); the mirror of `unmarked_code`."""
    answer = extract_answer(candidate, final_turn=False)
    return answer is not None and not (parses(answer) and _FUNCTION_DEF.search(answer))


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


def _tokenizer(base_model: str):
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def dpo_trainer(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                device: str = "auto"):
    """(trainer, tokenizer) for the SWEET-RL actor. nll_scope 'action': TRL's DPOTrainer optimising
    `losses.dpo_nll_loss` (Eq. 4's DPO with beta, plus nll_coef times the chosen action's mean token NLL); 'sequence':
    `SequenceNLLTrainer`. The reference is the LoRA's adapter disabled, or a frozen copy under full fine-tuning."""
    if cfg.nll_scope == "sequence":
        return sequence_trainer(rows, base_model, out_dir, cfg, callbacks, device)
    tokenizer = _tokenizer(base_model)
    dataset = build_dpo_dataset(tokenizer, rows, cfg.max_length)
    # No rpo_alpha in TRL 1.16: the "sft" loss term is the chosen completion's mean token NLL.
    losses = (["sigmoid", "sft"], [1.0, cfg.nll_coef]) if cfg.nll_coef > 0 else (["sigmoid"], [1.0])
    args = DPOConfig(**training_kwargs(cfg, checkpoint_dir(out_dir), device), beta=cfg.beta, loss_type=losses[0],
                     loss_weights=losses[1], max_length=cfg.max_length)
    model, ref = trainable_model(base_model, cfg, device, add_lora=False)  # TRL adds a LoRA after this seeding
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=lora_config(cfg.lora_r, cfg.lora_alpha) if cfg.lora else None,
                         callbacks=list(callbacks))
    return trainer, tokenizer


# ------------------------------------------------------------------------------ NLL over the chosen sequence
def sequence_row(tokenizer, i: int, row: dict, max_length: int) -> dict:
    """Row `i` for nll_scope 'sequence': prompt (shortened by `fit_prompt`) + each action, tokenized whole, with
    each action's span (its content + end of turn, the tokens the policy emits)."""
    r = dpo_row(tokenizer, i, row, max_length)
    out = {}
    for side in ("chosen", "rejected"):
        tok = tokenize_dialogue(tokenizer, r["prompt"] + r[side])
        out[f"{side}_ids"], out[f"{side}_span"] = tok["input_ids"], tok["turn_spans"][-1]
    return out


def collate_sequences(rows: list[dict], pad_id: int) -> dict:
    """Chosen rows first, then rejected, right-padded; `action_mask` marks each action's tokens, `nll_mask` every
    token a log-prob exists for (all but the first) of each row."""
    ids = [r["chosen_ids"] for r in rows] + [r["rejected_ids"] for r in rows]
    spans = [r["chosen_span"] for r in rows] + [r["rejected_span"] for r in rows]
    attn = mask_from_lengths([len(i) for i in ids])
    action = torch.zeros_like(attn)
    for k, (s, e) in enumerate(spans):
        action[k, s:e] = 1
    nll = attn.clone()
    nll[:, 0] = 0
    return {"input_ids": pad_rows(ids, pad_id), "attention_mask": attn, "action_mask": action, "nll_mask": nll}


class SequenceNLLTrainer(LossTrainer):
    """The actor's loss as the released run computes it: Eq. 4's DPO (`losses.dpo_loss`) on the actions' summed
    log-probs (the shared history would cancel in it), plus nll_coef times `losses.sequence_nll_loss` over every
    token of each chosen sequence, history included. The head runs on every position: a long history costs memory."""

    def __init__(self, *args, beta: float, nll_coef: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta, self.nll_coef = beta, nll_coef

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        m, switch = self.policy_and_reference(model)
        ids, attn, action, nll_mask = (inputs[k] for k in ("input_ids", "attention_mask", "action_mask", "nll_mask"))
        logp = token_logps(m, ids, attn, nll_mask)
        with torch.no_grad(), switch.disable_adapter():
            ref = token_logps(m, ids, attn, action)
        pol_seq, ref_seq, b = trajectory_logps(logp, action), trajectory_logps(ref, action), ids.shape[0] // 2
        dpo, r_c, r_r = dpo_loss(pol_seq[:b], pol_seq[b:], ref_seq[:b], ref_seq[b:], self.beta)
        nll = sequence_nll_loss(logp[:b], nll_mask[:b])
        self.record({"dpo_loss": dpo.item(), "nll": nll.item(), "rewards/chosen": r_c.mean().item(),
                     "rewards/rejected": r_r.mean().item(), "rewards/accuracies": (r_c > r_r).float().mean().item(),
                     "rewards/margins": (r_c - r_r).mean().item(), "logps/chosen": pol_seq[:b].mean().item(),
                     "logps/rejected": pol_seq[b:].mean().item()})
        loss = dpo + self.nll_coef * nll
        return (loss, {"rewards_chosen": r_c, "rewards_rejected": r_r}) if return_outputs else loss


def sequence_trainer(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
                     device: str = "auto"):
    """(SequenceNLLTrainer, tokenizer) on (prompt, chosen, rejected) rows."""
    tokenizer = _tokenizer(base_model)
    data = encode_all(list(enumerate(rows)), lambda ir: sequence_row(tokenizer, *ir, cfg.max_length), "train_dpo",
                      cfg.max_length, "rows")
    model, ref = trainable_model(base_model, cfg, device)
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    trainer = SequenceNLLTrainer(model=model, args=args, train_dataset=data, ref_model=ref, beta=cfg.beta,
                                 nll_coef=cfg.nll_coef, callbacks=list(callbacks),
                                 data_collator=lambda b: collate_sequences(b, tokenizer.pad_token_id))
    return trainer, tokenizer


def train_dpo(rows: list[dict], base_model: str, out_dir: Path, cfg: ActorConfig, callbacks=(),
              device: str = "auto") -> Path:
    """Stage 'train DPO actor': DPO (beta) + NLL (`dpo_trainer`); returns `out_dir/actor`: a LoRA adapter, or the
    whole model under full fine-tuning, + tokenizer + actor_config.json (`sweet.models.trained_actor` tells which)."""
    final = Path(out_dir) / "actor"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    trainer, tokenizer = dpo_trainer(rows, local_model_path(base_model), out_dir, cfg, callbacks, device)
    return run_training(trainer, final, tokenizer, lambda: write_actor_config(final, cfg))


def write_actor_config(final: Path, cfg: ActorConfig, **extra) -> None:
    """actor_config.json (the `DONE_FILE` of every actor method): the training config, plus e.g. a baseline's
    `method`."""
    (final / DONE_FILE).write_text(json.dumps({**cfg.model_dump(), **extra}, indent=1))
