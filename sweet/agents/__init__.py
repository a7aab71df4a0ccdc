"""Policy and simulator backends: local transformers models (`hf.ChatLM`), vLLM for GPU machines
(`vllm_backend.VLLMChat`, engine.backend=vllm), llama.cpp's server on the CPU (`llamacpp.LlamaCppChat`,
engine.backend=llamacpp) and OpenAI-compatible APIs (`api.ChatAPI`, for refs written `api:<model>[@base_url]`).
All expose the same batched `generate`."""

from __future__ import annotations


def default_backend() -> str:
    """The generation backend for local models on this machine's CPU: 'llamacpp' when llama-server is installed
    (the cpu-engine extra), else 'hf'. For the profile that flips a CPU default (engine.backend)."""
    from sweet.agents.llamacpp import default_backend as pick

    return pick()


def load_chat(ref: str, cfg, *, batch: int = 16, adapter=None):
    """The chat backend for a model ref; imports lazily so an API-only run never loads torch models."""
    from sweet.agents.api import ChatAPI, is_api_spec

    if is_api_spec(ref):
        if adapter is not None:
            raise ValueError(f"{ref}: an API model cannot take a LoRA adapter")
        a = cfg.api
        return ChatAPI.from_spec(ref, base_url=a.base_url or None, key_env=a.key_env, concurrency=a.concurrency,
                                 timeout_s=a.timeout_s, max_retries=a.max_retries)
    engine = getattr(cfg, "engine", None)
    if engine is not None and engine.backend == "vllm":
        from sweet.agents.vllm_backend import VLLMChat

        return VLLMChat.load(ref, cfg, adapter=adapter, batch_size=batch)
    if engine is not None and engine.backend == "llamacpp":
        from sweet.agents import llamacpp

        return llamacpp.load(ref, cfg, batch=batch, adapter=adapter)  # transformers when it cannot serve `ref`
    from sweet.agents.hf import ChatLM

    return ChatLM.load(ref, adapter=adapter, device=cfg.models.device, batch_size=batch,
                       models_dir=cfg.models.cache_dir)
