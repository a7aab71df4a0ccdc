#!/usr/bin/env python
"""P1b candidates: N sampled candidates per offline turn with a long history, llama.cpp's server
(engine.backend=llamacpp) vs transformers (engine.backend=hf), same model, same turns, both measured in this run.

The candidates stage's own loop (`sweet.stages.candidates`): the turns are cut from a few long ColBench-like
dialogues (a trajectory's turns come one after the other, each history the previous one plus an exchange, as
`offline_turns` orders them), `candidates.batch_size // n` turns per `generate` call, n completions per turn at
temperature 1.0.

  llama.cpp       one request per turn with `n` completions: the history is processed once and its KV cache shared
                  by the n sequences; a slot keeps the last history, so the next turn of the same dialogue only
                  processes the new exchange
  transformers    `ChatLM.generate(num_return_sequences=n)`: the history is repeated n times in the batch and
                  processed n times, every turn from the start

End-of-turn is ignored on both sides (each candidate is exactly --new-tokens long), so both do the same work.
Prints each engine's seconds, generated tokens/s and the share of wall time outside `generate`, and the ratio.

  python bench/candidate_sampling.py                           # Qwen2.5-Coder-0.5B, 16 turns x 16 candidates
  python bench/candidate_sampling.py --model HuggingFaceTB/SmolLM2-135M-Instruct --turns 4 --n 4   # quick
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("list dict value key sorted negative input return string integer empty default order case first last "
         "count duplicate filter length raise error none zero index window merge").split()


def n_tokens(tokenizer, conv: list[dict]) -> int:
    text = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_turns(n_turns: int, per_dialogue: int, history_tokens: int, tokenizer, rng: random.Random) -> list[list]:
    """`n_turns` histories ending with a user message: dialogues of `per_dialogue` consecutive turns whose first
    history is about `history_tokens` tokens long."""
    words = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    turns = []
    d = 0
    while len(turns) < n_turns:
        msgs = [{"role": "system", "content": "You are a helpful coding agent. Ask clarifying questions about the "
                 "task, then write the final function after 'I WANT TO ANSWER:'."},
                {"role": "user", "content": f"Task {d}: write a Python function `group_scores_{d}(records, "
                 f"window=3)` that groups the records by key and returns rolling statistics. "}]
        while n_tokens(tokenizer, msgs) < history_tokens:
            msgs[1]["content"] += words(16) + ". "
        for t in range(per_dialogue):
            if len(turns) == n_turns:
                break
            if t:
                msgs = msgs + [{"role": "assistant", "content": f"Question {t}: should the function {words(24)}?"},
                               {"role": "user", "content": f"Yes, it should {words(30)}. Otherwise {words(10)}."}]
            turns.append(msgs)
        d += 1
    return turns


class Timed:
    def __init__(self, chat):
        self.chat, self.seconds = chat, 0.0

    def generate(self, *a, **k):
        t0 = time.perf_counter()
        out = self.chat.generate(*a, **k)
        self.seconds += time.perf_counter() - t0
        return out


def main(argv=None) -> int:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct", help="built-in model (default: %(default)s)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"), help="converted models folder")
    ap.add_argument("--turns", type=int, default=16, help="offline turns (default 16)")
    ap.add_argument("--per-dialogue", type=int, default=4, help="consecutive turns of one dialogue (default 4)")
    ap.add_argument("--n", type=int, default=16, help="candidates per turn (default 16, the paper's)")
    ap.add_argument("--history-tokens", type=int, default=768, help="tokens of a dialogue's first history, at least "
                    "(default 768; each later turn adds an exchange of ~70)")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens per candidate (default 32)")
    ap.add_argument("--batch-size", type=int, default=32, help="candidates.batch_size: sequences per generate call "
                    "(default 32: 2 turns x 16)")
    ap.add_argument("--threads", type=int, default=0, help="threads of both engines (0: every CPU of this process)")
    ap.add_argument("--llama-args", default="", help="extra llama-server options, e.g. '-fa on' (default: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="llamacpp,hf", help="comma-separated: llamacpp, hf (default: %(default)s)")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    import torch

    from sweet.agents import _llama_server as ls
    from sweet.agents import llamacpp
    from sweet.agents.hf import ChatLM
    from sweet.config import EngineConfig, ModelsConfig, PipelineConfig

    if "llamacpp" in modes and ls.server_binary() is None:
        print(f"FAIL: {ls.INSTALL_HINT}", file=sys.stderr)
        return 1
    threads = args.threads or ls.default_threads()
    torch.set_num_threads(threads)
    n, new = args.n, args.new_tokens
    group = max(1, args.batch_size // n)

    hf = ChatLM.load(args.model, device="cpu", batch_size=args.batch_size, models_dir=args.models_dir)
    turns = build_turns(args.turns, args.per_dialogue, args.history_tokens, hf.tokenizer, random.Random(args.seed))
    lens = [n_tokens(hf.tokenizer, t) for t in turns]
    lc = None
    if "llamacpp" in modes:
        cfg = PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=args.models_dir),
                             engine=EngineConfig(backend="llamacpp", llamacpp_parallel=max(n, args.batch_size),
                                                 llamacpp_threads=threads,
                                                 llamacpp_ctx_per_slot=max(256, max(lens) + new + 64)))
        t0 = time.perf_counter()
        if args.llama_args:  # a server of its own with extra llama-server options (tuning experiments)
            server = ls.LlamaServer(llamacpp.gguf_for(args.model, args.models_dir), parallel=cfg.engine.llamacpp_parallel,
                                    ctx_per_slot=cfg.engine.llamacpp_ctx_per_slot, threads=threads,
                                    extra_args=args.llama_args.split()).start()
            lc = llamacpp.LlamaCppChat(server, name=args.model, batch_size=args.batch_size)
            lc.close = lambda close=lc.close: (close(), server.close())
        else:
            lc = llamacpp.load(args.model, cfg, batch=args.batch_size)
        start = time.perf_counter() - t0
        lc.api.extra_body["ignore_eos"] = True
        print(f"llama.cpp server: {lc.server.model.name}, {lc.server.parallel} slots, started in {start:.1f}s")
    print(f"model {args.model}, {threads} threads; {len(turns)} turns ({args.per_dialogue} per dialogue) with "
          f"histories of {min(lens)}-{max(lens)} tokens, {n} candidates x {new} tokens each at temperature 1.0, "
          f"{group} turns per generate call", flush=True)

    engines = {"llamacpp": lc, "hf": hf}
    rows = []
    try:
        for name in modes:
            chat = Timed(engines[name])
            chat.generate([[{"role": "user", "content": "warm up"}]], 4, 1.0, seed=1)  # untimed
            chat.seconds = 0.0
            if name == "hf":  # no early end of turn: exactly n x new tokens per turn, as llama.cpp with ignore_eos
                hf.model.generation_config.min_new_tokens = new
            t = time.perf_counter()
            out = []
            for s in range(0, len(turns), group):  # the candidates stage's loop
                out += chat.generate(turns[s:s + group], new, 1.0, seed=args.seed + s, num_return_sequences=n)
            wall = time.perf_counter() - t
            tokens = len(turns) * n * new
            failed = sum(not isinstance(o, str) for o in out)
            distinct = len(set(o for o in out if isinstance(o, str)))
            rows.append((name, wall, chat.seconds, tokens, failed, distinct, len(out)))
            print(f"  {name}: {wall:.1f}s", flush=True)
    finally:
        if lc is not None:
            lc.close()

    label = {"llamacpp": "llama.cpp (n shares a prompt)", "hf": "transformers (prompt x n)"}
    print(f"{'engine':<32}{'wall s':>8}{'gen s':>8}{'tokens':>8}{'tok/s':>8}{'outside gen':>13}")
    for name, wall, gen, tokens, *_ in rows:
        print(f"{label[name]:<32}{wall:>8.1f}{gen:>8.1f}{tokens:>8}{tokens / wall:>8.1f}{1 - gen / wall:>12.1%}")
    for name, *_, failed, distinct, total in rows:
        if failed or total != len(turns) * n:
            print(f"FAIL: {label[name]}: {failed} failed of {total} candidates", file=sys.stderr)
            return 1
        if distinct < len(turns):
            print(f"FAIL: {label[name]}: only {distinct} distinct candidates (not sampled?)", file=sys.stderr)
            return 1
    by = {r[0]: r for r in rows}
    if len(by) == 2:
        print(f"speed-up llama.cpp vs transformers: {by['hf'][1] / by['llamacpp'][1]:.2f}x "
              f"({by['llamacpp'][3] / by['llamacpp'][1]:.1f} vs {by['hf'][3] / by['hf'][1]:.1f} candidate tokens/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
