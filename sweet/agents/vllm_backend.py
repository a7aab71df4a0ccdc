"""A chat LM backend on vLLM (engine.backend=vllm): the same batched `generate` as `hf.ChatLM`, for GPU machines.

vLLM is an optional dependency (`pip install -e '.[gpu]'`): this module imports without it, and only building a
backend needs it. Prompts are the tokenizer's chat template, tokenized here exactly as `ChatLM` does, so the two
backends see the same tokens; vLLM then schedules all of them at once (continuous batching), so `batch_size` is
kept only for callers that group work by it.

- Sampling: `SamplingParams(n, temperature, max_tokens, seed)` per conversation; completions come back in input
  order, n consecutive per conversation. Each conversation gets its own seed (seed + i*n; vLLM gives child j of a
  request seed + j), so identical conversations (k episodes of one task) still draw different samples.
  Temperature 0 is greedy: vLLM refuses n > 1 there, so one completion is decoded and repeated n times.
- LoRA: an actor or critic adapter folder (PEFT) is served by the base model's engine through `LoRARequest`, so
  the base policy, the trained actor and a local simulator of the same model share one engine.
- Parallelism: `tensor_parallel_size` GPUs per model copy; `data_parallel_size` copies, each in its own process
  on its own GPUs (vLLM's offline `LLM` refuses data_parallel_size > 1 in one process), prompts split in order.
- Critic scoring on GPU: `prompt_logprobs(sequences, adapter)` returns log p(token | prefix) of given sequences
  (`SamplingParams(max_tokens=1, prompt_logprobs=0)`), with the critic's adapter or without it (the reference):
  SWEET's advantage is the mean over an action's tokens of the difference of the two.
- Engines are shared per model within a process and shut down when the last backend using one is closed (vLLM
  holds its share of GPU memory until then, and the training stages need it back).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from sweet.chat import prefill_of, template_options, whole_reply

GPU_HINT = "engine.backend=vllm needs vLLM, which is not installed: pip install -e '.[gpu]' (GPU machines only)"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def _vllm():
    try:
        import vllm
    except ImportError as e:  # one clear message instead of a bare ModuleNotFoundError deep in a stage
        raise ImportError(GPU_HINT) from e
    return vllm


def _lora_request(path: str, lora_id: int):
    from vllm.lora.request import LoRARequest
    return LoRARequest(Path(path).name or "adapter", lora_id, path)


def lora_rank(need: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of rank `need`."""
    for r in LORA_RANKS:
        if need <= r:
            return r
    raise ValueError(f"LoRA rank {need} is above vLLM's maximum {LORA_RANKS[-1]}")


def adapter_rank(adapter: str | Path) -> int:
    cfg = Path(adapter) / "adapter_config.json"
    if not cfg.is_file():
        raise FileNotFoundError(f"{adapter}: not a LoRA adapter folder (no adapter_config.json)")
    return int(json.loads(cfg.read_text()).get("r", 16))


def _execute(llm, kind: str, prompts: list[list[int]], params: list[dict], lora: tuple[str, int] | None):
    """Run one batch on an engine. generate -> per prompt (texts, generated token count); logprobs -> per prompt
    the log-probs of tokens 1.. given their prefix."""
    vllm = _vllm()
    sampling = [vllm.SamplingParams(**p) for p in params]
    request = _lora_request(*lora) if lora else None
    outs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], sampling, use_tqdm=False,
                        lora_request=request)
    if kind == "generate":
        return [([c.text for c in o.outputs], sum(len(c.token_ids) for c in o.outputs)) for o in outs]
    # prompt_logprobs[k] maps token ids to Logprob at position k; the prompt's own token is always among them.
    return [[o.prompt_logprobs[k][ids[k]].logprob for k in range(1, len(ids))] for o, ids in zip(outs, prompts)]


def build_llm(engine_kwargs: dict):
    return _vllm().LLM(**engine_kwargs)


# ---------------------------------------------------------------------------------------- data-parallel replicas
_REPLICA: Any = None  # the engine of a replica process


def _init_replica(devices: str, engine_kwargs: dict) -> None:
    global _REPLICA
    os.environ["CUDA_VISIBLE_DEVICES"] = devices  # before vLLM initialises CUDA in this process
    _REPLICA = build_llm(engine_kwargs)


def _replica_execute(kind, prompts, params, lora):
    return _execute(_REPLICA, kind, prompts, params, lora)


def replica_executor(devices: str, engine_kwargs: dict) -> Executor:
    """One process holding one engine on `devices` (spawned: CUDA cannot be forked)."""
    return ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_init_replica,
                               initargs=(devices, engine_kwargs))


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous, near-equal [start, end) ranges covering 0..n in order."""
    q, r = divmod(n, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + q + (1 if i < r else 0)
        bounds.append((start, end))
        start = end
    return bounds


class _Engine:
    """One model's engine: in this process (dp=1) or `dp` replica processes; shared by reference count."""

    def __init__(self, engine_kwargs: dict, tp: int, dp: int):
        self.kwargs, self.users = engine_kwargs, 0
        if dp == 1:
            self.llm, self.replicas = build_llm(engine_kwargs), []
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            gpus = [d.strip() for d in visible.split(",")] if visible else [str(i) for i in range(tp * dp)]
            if len(gpus) < tp * dp:
                raise ValueError(f"engine.data_parallel_size={dp} x tensor_parallel_size={tp} needs {tp * dp} GPUs; "
                                 f"{len(gpus)} visible")
            self.llm = None
            self.replicas = [replica_executor(",".join(gpus[i * tp:(i + 1) * tp]), engine_kwargs) for i in range(dp)]

    def run(self, kind: str, prompts: list[list[int]], params: list[dict], lora) -> list:
        if self.llm is not None:
            return _execute(self.llm, kind, prompts, params, lora)
        futures = [(rep.submit(_replica_execute, kind, prompts[a:b], params[a:b], lora) if b > a else None)
                   for rep, (a, b) in zip(self.replicas, _split(len(prompts), len(self.replicas)))]
        return [item for f in futures if f is not None for item in f.result()]

    def shutdown(self) -> None:
        for rep in self.replicas:
            rep.shutdown(wait=True)  # the replica process exits and frees its GPUs
        if self.llm is not None:
            core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()  # vLLM's engine core is a separate process holding the GPU memory
            self.llm = None
        gc.collect()
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


_ENGINES: dict[tuple, _Engine] = {}
_LORA_IDS: dict[str, int] = {}  # adapter path -> the int id vLLM caches it under (stable within a process)


def shutdown_engines() -> None:
    """Shut down every engine of this process (also run at exit)."""
    while _ENGINES:
        _ENGINES.popitem()[1].shutdown()


atexit.register(shutdown_engines)


class VLLMChat:
    def __init__(self, model_path: str, tokenizer, *, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.85, max_model_len: int = 0, max_lora_rank: int = 16,
                 adapter: str | Path | None = None, batch_size: int = 16, name: str = "", seed: int = 0):
        _vllm()  # fail here, with the install hint, before any GPU work
        self.tokenizer, self.adapter = tokenizer, (str(Path(adapter).resolve()) if adapter else None)
        self.batch_size, self.name, self.device = batch_size, name or model_path, "cuda"
        rank = lora_rank(max(max_lora_rank, adapter_rank(adapter) if adapter else 1))
        kwargs = dict(model=model_path, tokenizer=model_path, tensor_parallel_size=tensor_parallel_size,
                      gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                      # Always on: the same engine later serves the trained actor's adapter (evaluate).
                      enable_lora=True, max_lora_rank=rank)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self._key = (model_path, tensor_parallel_size, data_parallel_size, gpu_memory_utilization, max_model_len)
        engine = _ENGINES.get(self._key)
        if engine is not None and engine.kwargs["max_lora_rank"] < rank:
            raise ValueError(f"{self.name}: adapter rank needs max_lora_rank {rank}, but the running engine for "
                             f"{model_path} was built with {engine.kwargs['max_lora_rank']}")
        if engine is None:
            engine = _ENGINES[self._key] = _Engine(kwargs, tensor_parallel_size, data_parallel_size)
        engine.users += 1
        self._engine, self._closed = engine, False
        self._stop_ids = self._stop_token_ids()
        self.generated_tokens, self.generate_seconds = 0, 0.0  # throughput counters (bench, smoke script)

    @classmethod
    def load(cls, ref: str, cfg, *, adapter: str | Path | None = None, batch_size: int = 16) -> "VLLMChat":
        """The backend for a local model ref (hub id, alias or folder) with `cfg.engine`'s settings."""
        _vllm()
        from sweet import models

        path = models.resolve_model(ref, cfg.models.cache_dir)
        e = cfg.engine
        return cls(path, models.load_tokenizer(path), tensor_parallel_size=e.tensor_parallel_size,
                   data_parallel_size=e.data_parallel_size, gpu_memory_utilization=e.gpu_memory_utilization,
                   max_model_len=e.max_model_len, max_lora_rank=max(cfg.actor.lora_r, cfg.critic.lora_r),
                   adapter=adapter, batch_size=batch_size, name=str(adapter or ref))

    def prompt_text(self, conversation: list[dict]) -> str:
        # A conversation ending with an assistant message is continued (the prefill), not answered anew.
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, **template_options(conversation))

    def _ids(self, text: str) -> list[int]:
        # The chat template already holds BOS; vLLM's own tokenization would add a second one.
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _lora(self, adapter: str | None):
        if adapter is None:
            return None
        return adapter, _LORA_IDS.setdefault(adapter, len(_LORA_IDS) + 1)

    def generate(self, conversations: list[list[dict]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, num_return_sequences: int = 1) -> list[str]:
        """One completion per conversation (or `num_return_sequences` consecutive ones per conversation)."""
        if not conversations:
            return []
        n, greedy = num_return_sequences, temperature <= 0
        prompts = [self._ids(self.prompt_text(c)) for c in conversations]
        params = [dict(n=1 if greedy else n, temperature=0.0 if greedy else float(temperature), top_p=1.0,
                       max_tokens=max_new_tokens, stop_token_ids=self._stop_ids, skip_special_tokens=True,
                       seed=None if greedy or seed is None else seed + i * n) for i in range(len(prompts))]
        start = time.perf_counter()
        results = self._engine.run("generate", prompts, params, self._lora(self.adapter))
        self.generate_seconds += time.perf_counter() - start
        out: list[str] = []
        for conv, (texts, n_tokens) in zip(conversations, results):
            self.generated_tokens += n_tokens  # decoded tokens only (greedy repeats are copies)
            texts = [whole_reply(conv, t.rstrip() if prefill_of(conv) else t.strip()) for t in texts]
            out.extend(texts * n if greedy else texts)
        return out

    def prompt_logprobs(self, texts: list[str] | list[list[int]], adapter: str | Path | None = None
                        ) -> list[list[float]]:
        """Per sequence, log p(token_k | tokens_<k) for k = 1..len-1 under the base model, or with `adapter` (a
        LoRA critic) on. The critic-scoring path on GPU (`algos.vllm_scoring`): score "history + action" with and
        without the critic's adapter and average the difference over the action's tokens. A sequence is token ids,
        or text tokenized by `self.tokenizer` without added special tokens (pass chat-templated text)."""
        if not texts:
            return []
        prompts = [list(t) if isinstance(t, list) else self._ids(t) for t in texts]
        if any(len(p) < 2 for p in prompts):
            raise ValueError("prompt_logprobs needs sequences of at least two tokens")
        params = [dict(max_tokens=1, temperature=0.0, prompt_logprobs=0)] * len(prompts)
        lora = self._lora(str(Path(adapter).resolve()) if adapter else None)
        return self._engine.run("logprobs", prompts, params, lora)

    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0

    def close(self) -> None:
        """Release this backend's share of its engine; the last one out shuts the engine down."""
        if self._closed:
            return
        self._closed = True
        self._engine.users -= 1
        if self._engine.users <= 0 and _ENGINES.get(self._key) is self._engine:
            del _ENGINES[self._key]
            self._engine.shutdown()

    def _stop_token_ids(self) -> list[int]:
        # As ChatLM: stop at EOS and at ChatML's end of turn (SmolLM2/Qwen templates end turns with <|im_end|>).
        tok = self.tokenizer
        ids = {tok.eos_token_id}
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != tok.unk_token_id:
            ids.add(im_end)
        return sorted(i for i in ids if i is not None)
