"""CPU precision of torch work (models.cpu_precision): bf16 autocast for training and critic scoring where the CPU
has usable AMX bf16 tiles, float32 elsewhere. A stage applies its setting for its own duration (`cpu_precision`);
library calls outside a stage get float32."""

from __future__ import annotations

import contextlib
import contextvars

# torch's bf16 matmuls on 2 cores of this project's Xeon (AMX tiles): 2.0 TFLOP/s against 0.32 in float32, and a
# LoRA step of the 0.5B (2 x 768 tokens) 5.6 s against 18.7; on a CPU without AMX bf16 is ~5x *slower* than float32.
CPU_PRECISIONS = ("auto", "fp32", "bf16")
# What a library call gets is fp32; a pipeline stage applies its models.cpu_precision for its own duration. A context
# variable, like torch's autocast state: stages running at once in threads of one process do not see each other's.
_CPU_PRECISION: contextvars.ContextVar[str] = contextvars.ContextVar("sweet_cpu_precision", default="fp32")


def cpu_has_amx_bf16() -> bool:
    """Whether this CPU has AMX bf16 tiles (Linux's `amx_bf16` flag) that this process may use, where bf16 autocast
    pays off. A listed flag is not enough (llama.cpp's tile kernels die with SIGILL on some VMs that list it): the
    kernel must also grant the tile state, which torch asks for in `_init_amx`."""
    try:
        with open("/proc/cpuinfo") as fh:
            if not any(line.startswith("flags") and " amx_bf16" in line for line in fh):
                return False
    except OSError:
        return False
    import torch

    init = getattr(getattr(torch._C, "_cpu", None), "_init_amx", None)  # private; absent: trust the flag
    return bool(init()) if init is not None else True


def resolve_cpu_precision(precision: str) -> str:
    """'auto' -> 'bf16' on a CPU with AMX bf16, else 'fp32'; 'fp32' and 'bf16' as given."""
    if precision not in CPU_PRECISIONS:
        raise ValueError(f"models.cpu_precision={precision!r}: use one of {', '.join(CPU_PRECISIONS)}")
    if precision == "auto":
        return "bf16" if cpu_has_amx_bf16() else "fp32"
    return precision


def set_cpu_precision(precision: str) -> str:
    """Make CPU training and critic scoring in this process run in `precision` (models.cpu_precision); returns
    what it resolved to. Weights stay float32 either way: 'bf16' is autocast (matmuls in bf16, master weights,
    optimiser state, softmax and losses in float32)."""
    resolved = resolve_cpu_precision(precision)
    _CPU_PRECISION.set(resolved)
    return resolved


@contextlib.contextmanager
def cpu_precision(precision: str):
    """`set_cpu_precision(precision)` for the duration of a block (a stage), then back to what it was: a stage's
    setting never leaks into later library calls of the same process."""
    token = _CPU_PRECISION.set(resolve_cpu_precision(precision))
    try:
        yield _CPU_PRECISION.get()
    finally:
        _CPU_PRECISION.reset(token)


def cpu_bf16(device) -> bool:
    """Whether work on `device` runs under bf16 autocast: on the CPU when this process's precision says so."""
    return str(device).startswith("cpu") and _CPU_PRECISION.get() == "bf16"


def autocast(device):
    """bf16 autocast for inference on `device` where `cpu_bf16` says so, else nothing (GPUs load bf16 weights)."""
    if not cpu_bf16(device):
        return contextlib.nullcontext()
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16)
