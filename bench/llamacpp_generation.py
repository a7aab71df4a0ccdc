"""Benchmark: sampled generation on the CPU, llama.cpp's server (engine.backend=llamacpp) vs transformers' batched
`generate` (engine.backend=hf, `sweet.agents.hf.ChatLM`), both measured in the same run on the same prompts.

Default: Qwen2.5-Coder-0.5B-Instruct (llama.cpp serves its Q4_K_M GGUF, transformers the float32 folder converted
from that GGUF), 16 distinct prompts of ~256 tokens, 64 sampled tokens each (temperature 1.0, end-of-turn ignored on
both sides so that both generate exactly prompts x tokens). Prints the seconds and tokens/s of each side and the
ratio; model loading and server start-up are timed apart and left out of the ratio. `--shared` adds the candidates
stage's shape: one prompt, 16 completions (llama.cpp processes the prompt once; transformers repeats it).

    .venv/bin/python bench/llamacpp_generation.py
    .venv/bin/python bench/llamacpp_generation.py --model HuggingFaceTB/SmolLM2-135M-Instruct --prompts 32 --shared
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("list dict value key sorted negative input return string integer empty default order case first last "
         "count duplicate filter length raise error none zero index window merge").split()


def build_prompts(n: int, prompt_tokens: int, tokenizer, rng: random.Random) -> list[list[dict]]:
    """n distinct ColBench-like conversations whose chat-templated prompt is about `prompt_tokens` tokens."""
    out = []
    for i in range(n):
        words = []
        while True:
            conv = [{"role": "system", "content": "You are a helpful coding agent. Ask clarifying questions, then "
                     "write the final function after 'I WANT TO ANSWER:'."},
                    {"role": "user", "content": f"Task {i}: write a Python function `f{i}(records)` that "
                     + " ".join(words)}]
            text = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) >= prompt_tokens:
                break
            words.extend(rng.choice(WORDS) for _ in range(8))
        out.append(conv)
    return out


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct",
                    help="a built-in model id/alias (its GGUF is served by llama.cpp, its converted folder by "
                    "transformers) (default: %(default)s)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"), help="converted models folder")
    ap.add_argument("--prompts", type=int, default=16, help="distinct prompts (default: 16)")
    ap.add_argument("--prompt-tokens", type=int, default=256, help="tokens per prompt, at least (default: 256)")
    ap.add_argument("--new-tokens", type=int, default=64, help="sampled tokens per prompt (default: 64)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--shared", action="store_true", help="also: one prompt, --prompts completions of it")
    ap.add_argument("--threads", type=int, default=0, help="threads of both engines (0: every CPU of this process)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    from sweet import models
    from sweet.agents import _llama_server as ls
    from sweet.agents import llamacpp
    from sweet.agents.hf import ChatLM
    from sweet.config import EngineConfig, ModelsConfig, PipelineConfig

    if ls.server_binary() is None:
        print(f"FAIL: {ls.INSTALL_HINT}", file=sys.stderr)
        return 1
    threads = args.threads or ls.default_threads()
    torch.set_num_threads(threads)
    n, new = args.prompts, args.new_tokens

    hf, hf_load = timed(lambda: ChatLM.load(args.model, device="cpu", batch_size=n, models_dir=args.models_dir))
    convs = build_prompts(n, args.prompt_tokens, hf.tokenizer, random.Random(args.seed))
    lens = [len(hf.tokenizer(hf.prompt_text(c), add_special_tokens=False)["input_ids"]) for c in convs]
    cfg = PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=args.models_dir),
                         engine=EngineConfig(backend="llamacpp", llamacpp_parallel=n, llamacpp_threads=threads,
                                             llamacpp_ctx_per_slot=max(256, max(lens) + new + 64)))
    gguf = llamacpp.gguf_for(args.model, args.models_dir)
    if gguf is None:
        print(f"FAIL: {args.model} has no GGUF for llama.cpp (use a built-in model)", file=sys.stderr)
        return 1
    lc, lc_load = timed(lambda: llamacpp.load(args.model, cfg, batch=n))
    try:
        lc.api.extra_body["ignore_eos"] = True
        print(f"model {args.model}\n  transformers: {models.resolve_model(args.model, args.models_dir)} (float32), "
              f"loaded in {hf_load:.1f}s, torch threads {torch.get_num_threads()}\n  llama.cpp:    {gguf.name}, server "
              f"started in {lc_load:.1f}s, {n} slots, {threads} threads")
        print(f"{n} prompts of {min(lens)}-{max(lens)} tokens, {new} sampled tokens each, temperature "
              f"{args.temperature}")
        warm = [[{"role": "user", "content": "warm up"}]]
        hf.generate(warm, 4, args.temperature, seed=args.seed)  # first-call allocations, untimed
        lc.generate(warm, 4, args.temperature, seed=args.seed)
        hf.model.generation_config.min_new_tokens = new  # no early end-of-turn: exactly n x new tokens, as llama.cpp

        rows = []
        before = lc.api.stats["completion_tokens"]
        _, t_lc = timed(lambda: lc.generate(convs, new, args.temperature, seed=args.seed))
        tok_lc = lc.api.stats["completion_tokens"] - before
        _, t_hf = timed(lambda: hf.generate(convs, new, args.temperature, seed=args.seed))
        rows.append((f"{n} prompts x {new} tokens", t_hf, n * new, t_lc, tok_lc))
        if args.shared:
            # llama-server's `usage` counts one completion of an n-completion request: with end-of-turn ignored,
            # each of the n has exactly `new` tokens (checked above for n = 1 requests).
            _, s_lc = timed(lambda: lc.generate(convs[:1], new, args.temperature, seed=args.seed + 1,
                                                num_return_sequences=n))
            stok_lc = n * new
            _, s_hf = timed(lambda: hf.generate(convs[:1], new, args.temperature, seed=args.seed + 1,
                                                num_return_sequences=n))
            rows.append((f"1 prompt x {n} completions", s_hf, n * new, s_lc, stok_lc))
    finally:
        lc.close()

    print(f"{'workload':<28}{'transformers s':>15}{'tok/s':>8}{'llama.cpp s':>13}{'tok/s':>8}{'speed-up':>10}")
    for name, th, kh, tl, kl in rows:
        print(f"{name:<28}{th:>15.2f}{kh / th:>8.1f}{tl:>13.2f}{kl / tl:>8.1f}{th / tl:>9.2f}x")
    if any(kl != kh for _, _, kh, _, kl in rows):
        print("FAIL: llama.cpp generated a different number of tokens than asked for", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
