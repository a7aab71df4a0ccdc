"""Value-head critic: the paper's ablation that replaces SWEET-RL's LM-head advantage with a value function.

A scalar linear head (fp32) on the critic LM's last hidden states, mean-pooled over the tokens of one action a_t
(its content + end-of-turn token, the same span the LM-head critic scores). Because the LM is causal, the states of
a_t's tokens already summarise everything before them (c, the history o_t, the earlier tokens of a_t); pooling over
the action instead of the whole sequence keeps what is being valued, (o_t, a_t, c) -> V, separate from a long shared
context, and matches exactly what `score_candidates_value` pools at ranking time.

Training: regression (MSE) of V(o_t, a_t, c) on the final reward of the trajectory, one example per assistant turn.
Every turn of a trajectory gets the same target: the offline data has only the terminal reward (no discounting), so
V estimates the expected final reward after taking a_t - what the paper's value ablation learns. Causality also means
one forward pass over a whole trajectory gives each turn's example exactly as if the dialogue were cut after that
turn; the loss is the mean over turns in the batch, so a 5-turn trajectory counts as 5 examples.

The backbone is a LoRA (`lora_config`); the head rides in the adapter as a PEFT `modules_to_save` module, so Trainer
checkpoints and resume carry it; `value_head.pt` is a plain copy for use outside PEFT.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from accelerate.utils import extract_model_from_parallel
from peft import PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments

from sweet.algos.critic import DONE_FILE, candidate_inputs, last_hidden, span_mask, write_critic_config
from sweet.algos.dialogue import (encode_all, mask_from_lengths, pad_rows, tokenize_dialogue, turn_index,
                                  with_training_info)
from sweet.algos.losses import value_regression_loss
from sweet.algos.training import (LossTrainer, checkpoint_dir, load_base_model, local_model_path, lora_config,
                                  run_training, training_kwargs)
from sweet.models import model_dtype, pick_device
from sweet.precision import autocast

HEAD = "value_head"  # attribute of the base model that holds the head
HEAD_FILE = "value_head.pt"


def attach_value_head(base, bias: float = 0.0) -> torch.nn.Linear:
    """Add the fp32 head to a causal LM (before PEFT wraps it). Zero weights: an untrained head predicts `bias`."""
    head = torch.nn.Linear(base.config.get_text_config().hidden_size, 1, dtype=torch.float32)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.constant_(head.bias, bias)
    setattr(base, HEAD, head)
    return head


def value_lora_config(r: int, alpha: int, target_modules: str | list[str] = "all-linear"):
    cfg = lora_config(r, alpha, target_modules)
    cfg.modules_to_save, cfg.exclude_modules = [HEAD], [HEAD]  # train + save the head whole, no LoRA on it
    return cfg


def pool_spans(hidden: torch.Tensor, span_ids: torch.Tensor, n_spans: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of `hidden` [B, T, H] over each span: span_ids [B, T] = span index of a token, -1 outside spans.
    Returns (pooled [B, K, H] fp32, present [B, K] bool)."""
    onehot = (span_ids[:, None, :] == torch.arange(n_spans, device=span_ids.device)[None, :, None]).float()
    counts = onehot.sum(-1)
    pooled = torch.einsum("bkt,bth->bkh", onehot, hidden.float()) / counts.clamp(min=1)[..., None]
    return pooled, counts > 0


# Inputs of a vision-language model's forward that a batch may carry besides the tokens (`vlm_critic.py`).
EXTRA_INPUTS = ("pixel_values", "image_grid_thw", "mm_token_type_ids")


def span_values(model, input_ids, attention_mask, span_ids, n_spans: int, cache=None, **inputs):
    """V for each span: head(mean of the last hidden states over the span). Returns (values [B, K], present [B, K]).
    `inputs`: more inputs of the model's forward (`EXTRA_INPUTS`)."""
    base = extract_model_from_parallel(model).get_base_model()
    hidden = last_hidden(model, base.get_decoder(), input_ids, attention_mask, cache, **inputs)
    with torch.autocast(hidden.device.type, enabled=False):  # the head stays fp32 under bf16 mixed precision
        pooled, present = pool_spans(hidden, span_ids, n_spans)
        return getattr(base, HEAD)(pooled).squeeze(-1), present


def value_loss(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`losses.value_regression_loss` of every (trajectory, assistant turn) value of `batch` under `model`;
    returns (loss, values, present)."""
    turn_ids = batch["turn_ids"]
    values, present = span_values(model, batch["input_ids"], batch["attention_mask"], turn_ids,
                                  int(turn_ids.max()) + 1, **{k: batch[k] for k in EXTRA_INPUTS if k in batch})
    return value_regression_loss(values, present, batch["reward"]), values, present


# ------------------------------------------------------------------------------------------------ training
def encode_trajectory(tokenizer, traj: dict, cfg) -> dict:
    """(c +) dialogue -> token ids, per-token turn index (-1 outside assistant turns) and the reward."""
    for key in ("messages", "reward") + (("training_info",) if cfg.use_training_info else ()):
        if key not in traj:
            raise KeyError(f"value-critic trajectory is missing {key!r} (expects messages, reward, training_info)")
    reward = float(traj["reward"])
    if not math.isfinite(reward):
        raise ValueError(f"value-critic trajectory has a non-finite reward {traj['reward']!r}")
    msgs = with_training_info(traj["messages"], traj["training_info"]) if cfg.use_training_info else traj["messages"]
    tok = tokenize_dialogue(tokenizer, msgs, cfg.max_length)
    if not tok["turn_spans"]:
        raise ValueError("value-critic trajectory has no assistant turn")
    return {"input_ids": tok["input_ids"], "turn_ids": turn_index(len(tok["input_ids"]), tok["turn_spans"]),
            "reward": reward}


def collate_trajectories(rows: list[dict], pad_id: int) -> dict:
    ids = [r["input_ids"] for r in rows]
    return {"input_ids": pad_rows(ids, pad_id), "turn_ids": pad_rows([r["turn_ids"] for r in rows], -1),
            "attention_mask": mask_from_lengths([len(i) for i in ids]),
            "reward": torch.tensor([r["reward"] for r in rows], dtype=torch.float32)}


class ValueTrainer(LossTrainer):
    """Trainer whose loss is the value head's MSE on trajectory rewards (`losses.value_regression_loss`)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, values, present = value_loss(model, inputs)  # through the wrapper (DDP, FSDP, DeepSpeed), if any
        return (loss, {"values": values.detach()}) if return_outputs else loss


def value_trainer(trajectories: list[dict], base_model: str, out_dir: Path, cfg, callbacks=(), device: str = "auto"):
    """(ValueTrainer, tokenizer): LoRA backbone + fp32 head on `{"messages", "reward", "training_info"}` trajectories,
    one example per assistant turn."""
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    rows = encode_all(trajectories, lambda t: encode_trajectory(tokenizer, t, cfg), "train_value_critic",
                      cfg.max_length, "trajectories")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    base = load_base_model(base_model, cfg.seed, device)
    # Start at the mean reward: the first loss is the rewards' variance, and the head learns deviations from it.
    attach_value_head(base, bias=sum(r["reward"] for r in rows) / len(rows))
    model = get_peft_model(base, value_lora_config(cfg.lora_r, cfg.lora_alpha))
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    trainer = ValueTrainer(model=model, args=args, train_dataset=rows, callbacks=list(callbacks),
                           data_collator=lambda b: collate_trajectories(b, pad_id))
    return trainer, tokenizer


def train_value_critic(trajectories: list[dict], base_model: str, out_dir: Path, cfg, callbacks=(),
                       device: str = "auto") -> Path:
    """Stage 'train critic' for head='value': LoRA backbone + fp32 head, MSE on rewards; returns `out_dir/critic`
    (adapter with the head, value_head.pt, tokenizer, critic_config.json with head='value')."""
    final = Path(out_dir) / "critic"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    if not getattr(cfg, "lora", True):
        raise ValueError("the value-head critic trains a LoRA backbone; set critic.lora=True")
    base_model = local_model_path(base_model)
    trainer, tokenizer = value_trainer(trajectories, base_model, out_dir, cfg, callbacks, device)

    def write_extra():
        save_head_copy(final)
        write_critic_config(final, cfg, head="value", lora=True, base_model=base_model)

    return run_training(trainer, final, tokenizer, write_extra)


def save_head_copy(final: Path) -> None:
    """`value_head.pt`: the head read back from the saved adapter (whole even where training sharded it)."""
    from safetensors.torch import load_file
    saved = load_file(final / "adapter_model.safetensors")
    torch.save({k.split(f"{HEAD}.")[-1]: v.float() for k, v in saved.items() if f".{HEAD}." in k}, final / HEAD_FILE)


# ------------------------------------------------------------------------------------------------- scoring
def load_value_critic(critic_dir: str | Path, device: str = "auto", base_model: str | None = None):
    """(PeftModel with the trained head, tokenizer) from a `train_value_critic` output."""
    device, d = pick_device(device), Path(critic_dir)
    base_path = base_model or json.loads((d / DONE_FILE).read_text())["base_model"]
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=model_dtype(device))
    attach_value_head(base)  # placeholder; the adapter file holds the trained head
    model = PeftModel.from_pretrained(base, str(d)).to(device).eval()
    return model, AutoTokenizer.from_pretrained(d)


@torch.no_grad()
def score_candidates_value(model, tokenizer, history: list[dict], candidates: list[str], training_info: str, *,
                           use_training_info: bool = True, shared_prefix: bool = True,
                           max_length: int | None = None) -> list[float]:
    """V(o_t, a, c) of each candidate action a after `history` (ending with a user message); higher = better.
    Same call shape as `critic.score_candidates`, and the same shared-prefix KV cache over the history."""
    if not history or history[-1]["role"] != "user":
        raise ValueError("score_candidates_value: history must end with a user message (the turn the candidates "
                         "answer)")
    if not candidates:
        return []
    hist = with_training_info(history, training_info) if use_training_info else history
    with autocast(model.device):
        ids, attn, cache, off, lens = candidate_inputs(model, tokenizer, hist, candidates, shared_prefix, max_length)
        span_ids = span_mask(ids.shape[1], off, lens).to(ids.device) - 1  # 0 on the candidate's tokens, else -1
        values, _ = span_values(model, ids, attn, span_ids, 1, cache=cache)
    return values[:, 0].tolist()
