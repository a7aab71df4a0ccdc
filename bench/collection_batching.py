#!/usr/bin/env python
"""P1 collection: multi-turn ColBench episodes on the CPU, llama.cpp's server (engine.backend=llamacpp) vs batched
transformers (engine.backend=hf), same model, same episodes, both measured in this run.

Both run the real `sweet.colbench.backend.rollout` (agent turn, simulator reply, sandbox scoring of finished
episodes) with one model as agent and as simulator, as the collect stage does when the two refs are the same:

  llama.cpp          `LlamaCppChat` (the model's GGUF; Qwen2.5-Coder-0.5B: Q4_K_M): one server, 2 x episodes slots
                     so that each agent and each simulator conversation keeps its own slot and prompt cache (a turn
                     processes only the new messages), continuous batching
  transformers       `ChatLM` (float32 folder converted from the same GGUF), all live episodes in one left-padded
                     batch per call (batch_size = episodes): every call re-reads each whole history
  one at a time      (--modes ...,hf-sequential) ChatLM with batch_size 1, one episode after the other

Every episode plays all --turns agent turns (an answer before the last turn is not taken, so both engines do the
same number of calls of the same shape), the agent samples at --temperature, the simulator decodes greedily (the
protocol). Tokens are counted on the returned texts with the model's tokenizer, the same way for both engines;
"generation" is the wall time inside the agent's and the simulator's `generate` calls, and the rest of the wall
time (sandbox scoring, chat templates, Python) is reported as the share outside generation. Model loading and the
server's start are timed apart and left out. The sandbox's reference cache is cleared before each mode; a short
untimed warm-up runs first on each engine.

  python bench/collection_batching.py                                   # Qwen2.5-Coder-0.5B, 16 episodes x 3 turns
  python bench/collection_batching.py --model HuggingFaceTB/SmolLM2-135M-Instruct --episodes 4 --turns 2  # quick
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Timed:
    """A chat backend wrapped to sum the wall time inside `generate` and count the tokens it returns."""

    def __init__(self, chat, tokenizer):
        self.chat, self.tokenizer = chat, tokenizer
        self.name, self.batch_size, self.device = chat.name, chat.batch_size, getattr(chat, "device", "cpu")
        self.reset()

    def reset(self):
        self.seconds, self.calls, self.tokens, self.failures = 0.0, 0, 0, 0

    def generate(self, conversations, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        t0 = time.perf_counter()
        out = self.chat.generate(conversations, max_new_tokens, temperature, seed=seed,
                                 num_return_sequences=num_return_sequences)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        for text in out:
            if isinstance(text, str):
                self.tokens += len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            else:
                self.failures += 1
        return out


def make_episodes(tasks, n: int, turns: int):
    from sweet.colbench.backend import Episode
    return [Episode(tasks[i % len(tasks)], i // len(tasks), max_turns=turns) for i in range(n)]


def main(argv=None) -> int:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct",
                    help="agent and simulator: a built-in model id/alias (default: %(default)s)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"), help="converted models folder")
    ap.add_argument("--tasks", default="bundled", help="task source for load_tasks (default: %(default)s)")
    ap.add_argument("--episodes", type=int, default=16, help="episodes per mode (default 16)")
    ap.add_argument("--turns", type=int, default=3, help="agent turns per episode, all played (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="agent tokens per turn (default 64)")
    ap.add_argument("--sim-max-new-tokens", type=int, default=32, help="simulator tokens per reply (default 32)")
    ap.add_argument("--temperature", type=float, default=0.7, help="agent sampling temperature (default 0.7, the "
                    "collect stage's)")
    ap.add_argument("--modes", default="llamacpp,hf", help="comma-separated: llamacpp, hf, hf-sequential "
                    "(default: %(default)s)")
    ap.add_argument("--threads", type=int, default=0, help="threads of both engines (0: every CPU of this process)")
    ap.add_argument("--llama-args", default="", help="extra llama-server options, e.g. '-fa on' (default: none)")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("llamacpp", "hf", "hf-sequential")]
    if bad or not modes:
        ap.error(f"unknown modes {bad}")

    import torch

    from sweet import sandbox
    from sweet.agents import _llama_server as ls
    from sweet.agents import llamacpp
    from sweet.agents.hf import ChatLM
    from sweet.colbench import backend
    from sweet.colbench.sources import load_tasks
    from sweet.config import EngineConfig, ModelsConfig, PipelineConfig

    if "llamacpp" in modes and ls.server_binary() is None:
        print(f"FAIL: {ls.INSTALL_HINT}", file=sys.stderr)
        return 1
    threads = args.threads or ls.default_threads()
    torch.set_num_threads(threads)
    n = args.episodes
    tasks = load_tasks(args.tasks)

    # Every episode plays all its turns: an answer counts only on the last one (the same work on both engines).
    original_extract = backend.extract_answer
    backend.extract_answer = lambda text, final_turn: original_extract(text, True) if final_turn else None

    t0 = time.perf_counter()
    hf = ChatLM.load(args.model, device="cpu", batch_size=n, models_dir=args.models_dir)
    hf_load = time.perf_counter() - t0
    engines, starts = {}, {}
    if "hf" in modes:
        engines["hf"] = Timed(hf, hf.tokenizer)
    if "hf-sequential" in modes:
        engines["hf-sequential"] = Timed(ChatLM(hf.model, hf.tokenizer, "cpu", batch_size=1, name="single"),
                                         hf.tokenizer)
    lc = None
    if "llamacpp" in modes:
        cfg = PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=args.models_dir),
                             engine=EngineConfig(backend="llamacpp", llamacpp_parallel=2 * n, llamacpp_threads=threads,
                                                 llamacpp_ctx_per_slot=4096))
        t0 = time.perf_counter()
        if args.llama_args:  # a server of its own with extra llama-server options (tuning experiments)
            server = ls.LlamaServer(llamacpp.gguf_for(args.model, args.models_dir), parallel=2 * n,
                                    ctx_per_slot=4096, threads=threads, extra_args=args.llama_args.split()).start()
            lc = llamacpp.LlamaCppChat(server, name=args.model, batch_size=n)
            lc.close = lambda close=lc.close: (close(), server.close())
        else:
            lc = llamacpp.load(args.model, cfg, batch=n)
        starts["llamacpp"] = time.perf_counter() - t0
        if not isinstance(lc, llamacpp.LlamaCppChat):
            print(f"FAIL: {args.model} is not served by llama.cpp here", file=sys.stderr)
            return 1
        engines["llamacpp"] = Timed(lc, hf.tokenizer)
    print(f"model {args.model}: transformers float32 folder loaded in {hf_load:.1f}s"
          + (f", llama.cpp {lc.server.model.name} server started in {starts['llamacpp']:.1f}s "
             f"({lc.server.parallel} slots)" if lc else "")
          + f"; {threads} threads each\n{n} episodes over {min(n, len(tasks))} tasks of {args.tasks}, {args.turns} "
          f"agent turns each (all played), {args.max_new_tokens} agent tokens at temperature {args.temperature} / "
          f"{args.sim_max_new_tokens} simulator tokens greedy", flush=True)

    kw = dict(max_new_tokens=args.max_new_tokens, sim_max_new_tokens=args.sim_max_new_tokens,
              temperature=args.temperature, seed=0)
    rows = []
    try:
        for name, chat in engines.items():
            backend.rollout(make_episodes(tasks, 2, 1), chat, chat, **{**kw, "max_new_tokens": 4})  # warm-up
            sandbox._REF_CACHE.clear()
            chat.reset()
            t = time.perf_counter()
            if name == "hf-sequential":
                eps = make_episodes(tasks, n, args.turns)
                for e in eps:
                    backend.rollout([e], chat, chat, **kw)
            else:
                eps = backend.rollout(make_episodes(tasks, n, args.turns), chat, chat, **kw)
            wall = time.perf_counter() - t
            rows.append((name, wall, chat.seconds, chat.tokens, chat.calls, chat.failures,
                         sum(e.n_turns for e in eps) / n))
            print(f"  {name}: {wall:.1f}s", flush=True)
    finally:
        if lc is not None:
            lc.close()
        backend.extract_answer = original_extract

    label = {"llamacpp": "llama.cpp", "hf": f"transformers (batch={n})", "hf-sequential": "transformers, 1 at a time"}
    base = next((r for r in rows if r[0] == "hf"), rows[-1])
    print(f"{'engine':<28}{'wall s':>8}{'episodes/s':>12}{'gen s':>8}{'tokens':>8}{'tok/s':>8}"
          f"{'outside gen':>13}{'vs transformers':>17}")
    for name, wall, gen, tokens, calls, failures, turns in rows:
        print(f"{label[name]:<28}{wall:>8.1f}{n / wall:>12.3f}{gen:>8.1f}{tokens:>8}{tokens / gen:>8.1f}"
              f"{1 - gen / wall:>12.1%}{base[1] / wall:>16.2f}x")
    for name, *_, failures, turns in rows:
        if failures:
            print(f"FAIL: {label[name]}: {failures} failed generations", file=sys.stderr)
            return 1
        if abs(turns - args.turns) > 1e-9:
            print(f"FAIL: {label[name]}: episodes played {turns:.2f} turns on average, not {args.turns}",
                  file=sys.stderr)
            return 1
    by = {r[0]: r for r in rows}
    if "llamacpp" in by and "hf" in by:
        lw, hw = by["llamacpp"][1], by["hf"][1]
        print(f"speed-up llama.cpp vs batched transformers: {hw / lw:.2f}x wall ({by['llamacpp'][3] / by['llamacpp'][2]:.1f} "
              f"vs {by['hf'][3] / by['hf'][2]:.1f} generated tokens/s); share of wall time outside generation: "
              f"llama.cpp {1 - by['llamacpp'][2] / lw:.1%}, transformers {1 - by['hf'][2] / hw:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
