#!/usr/bin/env python
"""Collection throughput: batched turns across N episodes vs one episode at a time, same model, same work.

Both modes run the real `sweet.colbench.backend.rollout` (agent turn, simulator reply, sandbox scoring of finished
episodes) with `sweet.agents.hf.ChatLM` as policy and as simulator (one model serves both, as in the collect stage
when the two refs are the same), on the same episodes (the bundled easy backend tasks, cycled to --episodes):

  batched (batch=N)      one rollout over all N episodes; every turn is one generate call for all live agents and
                         one for all live simulators (ChatLM batch_size N, left padding) -- what the stage does
  one at a time          N rollouts of one episode each, ChatLM batch_size 1 (no padding)

Decoding is greedy for the agent and the simulator in both modes, so both do the same work and should produce the
same dialogues (left padding can change a greedy token now and then on a CPU in float32: the match count is
reported, not enforced).  Time inside the model's forward passes is summed by a forward pre/post hook on the model;
the rest of the wall time (tokenisation, chat templates, generate's own loop, sandbox scoring, Python) is reported
as the share outside forward.  The sandbox's reference cache is cleared before each mode; a short untimed warm-up
runs first.  The ratio column is episodes/s relative to one at a time.

  python bench/collection_batching.py                          # SmolLM2-135M, 16 episodes, 2 turns, 32 tokens
  python bench/collection_batching.py --episodes 4 --max-new-tokens 16 --turns 1   # smallest
  python bench/collection_batching.py --model Qwen/Qwen2.5-Coder-0.5B-Instruct
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # rollout's progress bar, once per episode in the sequential mode
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class ForwardTimer:
    """Wall time spent inside `model.forward` (pre/post hooks on the top-level module), and the number of calls."""

    def __init__(self, model):
        self.seconds, self.calls, self._t0 = 0.0, 0, None
        self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, module, args):
        self._sync()
        self._t0 = time.perf_counter()

    def _post(self, module, args, output):
        self._sync()
        self.seconds += time.perf_counter() - self._t0
        self.calls += 1

    @staticmethod
    def _sync():
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def reset(self):
        self.seconds, self.calls = 0.0, 0

    def close(self):
        for h in self._handles:
            h.remove()


def make_episodes(tasks, n: int, turns: int):
    from sweet.colbench.backend import Episode
    return [Episode(tasks[i % len(tasks)], i // len(tasks), max_turns=turns) for i in range(n)]


def main(argv=None) -> int:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                    help="policy and simulator: model id/alias or folder, resolved with sweet.models.resolve_model "
                         "(default: %(default)s)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"), help="converted models folder")
    ap.add_argument("--tasks", default="bundled:easy", help="task source for load_tasks (default: %(default)s)")
    ap.add_argument("--episodes", type=int, default=16, help="episodes per mode; also the batch size of the batched "
                    "mode (default 16)")
    ap.add_argument("--turns", type=int, default=2, help="agent turns per episode, max_turns (default 2)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="agent tokens per turn (default 32)")
    ap.add_argument("--sim-max-new-tokens", type=int, default=None, help="simulator tokens per reply "
                    "(default: --max-new-tokens)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda (default auto)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    sim_tokens = args.sim_max_new_tokens or args.max_new_tokens

    import torch

    from sweet import models
    from sweet.agents.hf import ChatLM
    from sweet import sandbox
    from sweet.colbench import backend
    from sweet.colbench.sources import load_tasks

    if args.threads:
        torch.set_num_threads(args.threads)
    device = models.pick_device(args.device)
    path = models.resolve_model(args.model, args.models_dir)
    tok = models.load_tokenizer(path)
    model = models.load_model(path, device=device)
    tasks = load_tasks(args.tasks)
    n = args.episodes
    print(f"model {path} on {device} (torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs)\n"
          f"{n} episodes over {min(n, len(tasks))} tasks of {args.tasks}, {args.turns} agent turns, "
          f"{args.max_new_tokens} agent / {sim_tokens} simulator tokens, greedy decoding", flush=True)

    batched_lm = ChatLM(model, tok, device, batch_size=n, name="batched")
    single_lm = ChatLM(model, tok, device, batch_size=1, name="single")
    kw = dict(max_new_tokens=args.max_new_tokens, sim_max_new_tokens=sim_tokens, temperature=0.0, seed=0)

    # Warm-up (untimed): first-call allocations, the sandbox's first child.
    warm = make_episodes(tasks, 2, 1)
    backend.rollout(warm, batched_lm, batched_lm, **{**kw, "max_new_tokens": 4})

    timer = ForwardTimer(model)

    def batched():
        eps = make_episodes(tasks, n, args.turns)
        backend.rollout(eps, batched_lm, batched_lm, **kw)
        return eps

    def one_at_a_time():
        eps = make_episodes(tasks, n, args.turns)
        for e in eps:
            backend.rollout([e], single_lm, single_lm, **kw)
        return eps

    rows, results = [], {}
    for name, fn in ((f"batched (batch={n})", batched), ("one at a time", one_at_a_time)):
        sandbox._REF_CACHE.clear()
        timer.reset()
        t = time.perf_counter()
        results[name] = fn()
        wall = time.perf_counter() - t
        rows.append((name, wall, timer.seconds, timer.calls))
    timer.close()

    base = n / rows[-1][1]
    print(f"{'mode':<20}{'seconds':>9}{'episodes/s':>12}{'vs one at a time':>18}{'forward s':>11}"
          f"{'forwards':>10}{'outside forward':>17}")
    for name, wall, fwd, calls in rows:
        rate = n / wall
        print(f"{name:<20}{wall:>9.2f}{rate:>12.3f}{rate / base:>17.2f}x{fwd:>11.2f}{calls:>10}"
              f"{1 - fwd / wall:>16.1%}")
    a, b = results.values()
    same_dialogue = sum(x.messages == y.messages for x, y in zip(a, b))
    same_reward = sum(x.reward == y.reward for x, y in zip(a, b))
    turns = [x.n_turns for x in a]
    print(f"speed-up {rows[-1][1] / rows[0][1]:.2f}x; batched run: {1 - rows[0][2] / rows[0][1]:.1%} of wall time "
          f"outside model forward passes")
    print(f"greedy agreement: {same_dialogue}/{n} episodes with identical dialogues, {same_reward}/{n} with the same "
          f"reward (left padding may flip a near-tie token on CPU float32); mean turns {sum(turns) / n:.2f}, "
          f"mean reward batched {sum(x.reward for x in a) / n:.3f} vs one at a time {sum(x.reward for x in b) / n:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
