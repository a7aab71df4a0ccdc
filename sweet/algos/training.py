"""The one shape of every training stage here (critic, value-head critic, DPO actor, RFT, multi-turn DPO).

Each `train_*` reads top to bottom the same way and differs from the others only in its data and its loss:

    final = Path(out_dir) / "critic"                   # or "actor"
    if (final / DONE_FILE).exists(): return final      # content-addressed output already complete
    rows = encode_all(items, encode, ...)              # data: token rows (`sweet.algos.dialogue`)
    model, ref = trainable_model(base_model, cfg, device)   # seeded: LoRA A / head init come next
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    trainer = SomeTrainer(model, args, rows, ...)      # loss: a `losses` function (`LossTrainer`) or TRL's
    return run_training(trainer, final, tokenizer, write_extra)   # resume, train, save

`device` is `models.device` (`sweet.models.pick_device`): 'cpu' trains on the CPU even where a GPU is visible.
Callbacks (MLflow metrics, the DDP replica check) come from the stage and go to the Trainer unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers
from accelerate.utils import extract_model_from_parallel
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from sweet.models import model_dtype, pick_device
from sweet.precision import cpu_bf16


def local_model_path(base_model: str) -> str:
    """A local model folder as an absolute path (so a saved adapter names a base that loads from any cwd); a hub id
    unchanged."""
    return str(Path(base_model).resolve()) if Path(base_model).is_dir() else base_model


def load_base_model(base_model: str, seed: int, device: str = "auto", model_class=AutoModelForCausalLM):
    """The model to train (a `model_class`), in the precision of `device`, with every RNG seeded first: LoRA's A
    matrices and a value head are initialised after this and before the Trainer seeds anything."""
    transformers.set_seed(seed)
    return model_class.from_pretrained(base_model, dtype=model_dtype(pick_device(device)))


def lora_config(r: int, alpha: int, target_modules: str | list[str] = "all-linear") -> LoraConfig:
    # lora_dropout 0: with B zero-initialised the adapter starts exactly at pi_ref (advantage 0), deterministically.
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=target_modules, task_type="CAUSAL_LM")


class FullFTModel:
    """A fully fine-tuned model (critic or actor) plus its frozen initial model. `disable_adapter()` swaps the
    reference in, like PEFT's adapter switch, so `token_logps` / `score_candidates` and the trainers' losses run the
    same code for LoRA and full fine-tuning."""

    def __init__(self, model, reference):
        self.model, self.reference, self._active = model, reference.eval().requires_grad_(False), model

    @contextmanager
    def disable_adapter(self):
        self._active = self.reference
        try:
            yield
        finally:
            self._active = self.model

    def __call__(self, *args, **kwargs):
        return self._active(*args, **kwargs)

    def __getattr__(self, name: str):  # config, device, get_decoder(), get_output_embeddings(): the active model's
        if name in ("model", "reference", "_active"):
            raise AttributeError(name)  # not set yet (e.g. during copy): never recurse
        return getattr(extract_model_from_parallel(self._active), name)  # through a DDP/DeepSpeed wrapper


def trainable_model(base_model: str, cfg, device: str = "auto", *, add_lora: bool = True, reference: bool = True):
    """(model to train, frozen reference or None). `cfg.lora` (default): a LoRA on the base (added here unless
    `add_lora=False`, for TRL, which adds it from `peft_config`); pi_ref is the adapter disabled, so no reference
    copy. Full fine-tuning: the whole model, plus (unless `reference=False`: SFT has none) a frozen deep copy of its
    initial weights as pi_ref."""
    model = load_base_model(base_model, cfg.seed, device)
    if getattr(cfg, "lora", True):
        return (get_peft_model(model, lora_config(cfg.lora_r, cfg.lora_alpha)) if add_lora else model), None
    return model, (copy.deepcopy(model).eval().requires_grad_(False) if reference else None)


def checkpoint_dir(out_dir: str | Path) -> Path:
    """Where a stage's Trainer checkpoints go (and resumes from)."""
    return Path(out_dir) / "checkpoints"


_ARG_NAMES = {f.name for f in dataclasses.fields(TrainingArguments)}
# Named `activation_checkpointing` in newer transformers, `gradient_checkpointing` before (vLLM 0.33 pins < 5.21).
_CHECKPOINTING = next(n for n in ("activation_checkpointing", "gradient_checkpointing") if n in _ARG_NAMES)


def optimizer_kwargs(cfg) -> dict:
    """AdamW betas, schedule and warm-up of `cfg` as TrainingArguments. At the config defaults these are exactly
    transformers' own (betas (0.9, 0.999), linear to 0, no warm-up). 'cosine' is transformers' cosine_with_min_lr
    (the scheduler the released OpenRLHF code builds), warm-up ceil(ratio x steps) steps in both."""
    beta1, beta2 = getattr(cfg, "adam_betas", (0.9, 0.999))
    out = dict(adam_beta1=beta1, adam_beta2=beta2, lr_scheduler_type="linear")
    if getattr(cfg, "schedule", "linear") == "cosine":
        out.update(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": cfg.min_lr_ratio})
    ratio = getattr(cfg, "warmup_ratio", 0.0)
    if ratio:  # a ratio has its own field in older transformers; newer ones read a float < 1 in warmup_steps
        out["warmup_ratio" if "warmup_ratio" in _ARG_NAMES else "warmup_steps"] = ratio
    return out


def training_kwargs(cfg, ckpt_dir: Path, device: str = "auto") -> dict:
    """TrainingArguments (or TRL's DPOConfig / SFTConfig) of every trainer: the optimisation settings of `cfg`,
    checkpoints in `ckpt_dir`, the CPU or the GPUs and their precision from `device` (bf16 on the CPU: autocast,
    where `sweet.models.cpu_bf16` says so), no reporting."""
    dev = pick_device(device)
    cuda = dev.startswith("cuda")
    return dict(output_dir=str(ckpt_dir), learning_rate=cfg.lr, num_train_epochs=cfg.epochs, **optimizer_kwargs(cfg),
                per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
                save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=2, logging_steps=1,
                report_to="none", seed=cfg.seed, data_seed=cfg.seed, use_cpu=not cuda,
                bf16=(cuda and torch.cuda.is_bf16_supported()) or cpu_bf16(dev), fp16=False, **{_CHECKPOINTING: False},
                remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=False,  # a bar per stage
                # Every trainable weight is used in each step, some (value head, LM head) after the wrapped forward:
                # DDP's unused-parameter search would wrongly mark those ready early.
                ddp_find_unused_parameters=False)


def run_training(trainer, final: Path, tokenizer, write_extra: Callable[[], None] = lambda: None) -> Path:
    """Train `trainer` to the end, resuming from the newest checkpoint in its output_dir if a run died; then save
    the trained adapter (or model) to `final`, the tokenizer, and `write_extra()`'s files (written last: a stage's
    "done" marker goes there). Returns `final`.

    Every process calls this: under ZeRO-3 or FSDP, `trainer.save_model` gathers the shards collectively and only
    the main process writes; the other files are written by the main process alone."""
    ckpt_dir = Path(trainer.args.output_dir)
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        (final / "training_args.bin").unlink(missing_ok=True)  # a pickle of the Trainer's arguments: not an output
        tokenizer.save_pretrained(final)
        # The per-step logs (loss, the recipe's metrics): what `first_pass_fit` reads after the stage.
        (final / LOG_FILE).write_text(json.dumps(trainer.state.log_history))
        write_extra()
    trainer.accelerator.wait_for_everyone()
    return final


LOG_FILE = "log_history.json"


def first_pass_fit(log_history: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    """Mean of each metric in `keys` over the second half of the logged steps of the first epoch. Each of those
    batches is seen for the first time when it is logged, so this is a held-out measure of what the model has
    learned by mid-epoch (a prequential estimate), free of extra compute. {} when nothing was logged."""
    first = [h for h in log_history if h.get("epoch", 0) <= 1.0 and any(k in h for k in keys)]
    late = first[len(first) // 2:]
    return {f"late_{k}": sum(h[k] for h in late if k in h) / sum(k in h for h in late)
            for k in keys if any(k in h for h in late)}


class LossTrainer(Trainer):
    """A Trainer whose `compute_loss` a subclass writes with a `sweet.algos.losses` function. The loss is a mean
    over the batch, so Trainer divides it by grad_accum itself; `record(...)` notes a step's metrics, and each
    training log carries their average since the previous log."""

    loss_is_scaled_for_ga = False

    def __init__(self, *args, ref_model=None, **kwargs):
        """`ref_model`: the frozen initial model of a fully fine-tuned model (`trainable_model`); None = LoRA, whose
        reference is the adapter disabled."""
        super().__init__(*args, **kwargs)
        self.ref_model = None if ref_model is None else ref_model.to(self.args.device).eval().requires_grad_(False)
        self._metrics: dict[str, list[float]] = {}

    def policy_and_reference(self, model):
        """(what a step forwards through, whose `disable_adapter()` gives pi_ref). LoRA: `model` itself -- it may be
        wrapped (DDP, FSDP, DeepSpeed), and the wrapper syncs gradients only there -- and the adapter switch of what
        it wraps; full fine-tuning: the model with its frozen copy (`FullFTModel`) for both."""
        if self.ref_model is None:
            return model, self.accelerator.unwrap_model(model)
        both = FullFTModel(model, self.ref_model)
        return both, both

    def record(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self._metrics.setdefault(k, []).append(v)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._metrics and "loss" in logs:  # training logs only: average what accumulated since the last log
            logs.update({k: sum(v) / len(v) for k, v in self._metrics.items()})
            self._metrics.clear()
        super().log(logs, start_time)
