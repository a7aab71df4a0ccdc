"""What every trainer here shares: device and precision, the LoRA shape, the TrainingArguments (checkpoints,
no reporting), and saving the result from one process or many (`accelerate launch`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from peft import LoraConfig
from transformers import TrainingArguments


def resolve_device(device: str = "auto") -> str:
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def model_dtype(device: str) -> torch.dtype:
    # bf16 matmuls are ~5x slower than fp32 on this CPU; on a GPU bf16 halves memory.
    return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32


def lora_config(r: int, alpha: int) -> LoraConfig:
    # lora_dropout 0: with B zero-initialised the adapter starts exactly at pi_ref (advantage 0), deterministically.
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


# Named `activation_checkpointing` in newer transformers, `gradient_checkpointing` before (vLLM 0.33 pins < 5.21).
_CHECKPOINTING = next(n for n in ("activation_checkpointing", "gradient_checkpointing")
                      if n in {f.name for f in dataclasses.fields(TrainingArguments)})


def training_kwargs(cfg, ckpt_dir: Path) -> dict:
    """TrainingArguments shared by the critic and the actor (checkpoints, precision from the device, no reporting)."""
    cuda = torch.cuda.is_available()
    return dict(output_dir=str(ckpt_dir), learning_rate=cfg.lr, num_train_epochs=cfg.epochs,
                per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
                save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=2, logging_steps=1,
                report_to="none", seed=cfg.seed, data_seed=cfg.seed, use_cpu=not cuda,
                bf16=cuda and torch.cuda.is_bf16_supported(), fp16=False, **{_CHECKPOINTING: False},
                remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=False,  # a bar per stage
                # Every trainable weight is used in each step, some (value head, LM head) after the wrapped forward:
                # DDP's unused-parameter search would wrongly mark those ready early.
                ddp_find_unused_parameters=False)


def save_trained(trainer, final: Path, tokenizer, write_extra=lambda: None) -> None:
    """Save the trained adapter (or model) to `final`, then the tokenizer and `write_extra()` files.

    Every process calls this: under ZeRO-3 or FSDP, `trainer.save_model` gathers the shards collectively and only
    the main process writes; the other files are written by the main process alone."""
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        (final / "training_args.bin").unlink(missing_ok=True)  # a pickle of the Trainer's arguments: not an output
        tokenizer.save_pretrained(final)
        write_extra()
    trainer.accelerator.wait_for_everyone()
