#!/usr/bin/env python
"""Throughput of the ColBench answer sandbox: what isolation costs.

Answers are the bundled backend tasks' own references plus one mutant of each (the reference with its function
wrapped so numeric results are off by one), 10 tests each.  Measured side by side, answers per second:

  fork server (workers=N)   sweet.sandbox.evaluate_many, every protection on, N = os.cpu_count(): one fork
                            server per worker forks a child per answer (the default where it can run: root)
  spawn per answer (N)      the same with sandbox.FORK_SERVER = False: a new interpreter per answer
  fork server (workers=1)   the fork server, one child at a time
  in-process                exec the answer and the reference in this interpreter, compare with ==; no isolation

Each mode computes every reference once (the sandbox caches them; the in-process mode keeps a dict), so the
reference cost is in all of them.  Before each sandbox mode, its servers are started (not timed: they live as
long as the process).  p50/p99: wall time of one answer's evaluation (``evaluate_answer``: one child, 10 calls;
the references are already computed then).  "vs in-process" is answers/s relative to in-process; the last line
is fork server / spawn at N workers.

  python bench/sandbox_throughput.py                 # 100 tasks x (reference + mutant) = 200 answers per mode
  python bench/sandbox_throughput.py --tasks 20 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sweet import sandbox  # noqa: E402
from sweet.colbench.sources import load_tasks  # noqa: E402


def mutant(reference: str, call: str) -> str:
    name = re.match(r"\s*([A-Za-z_]\w*)\s*\(", call).group(1)
    return (f"{reference}\n\n_orig_{name} = {name}\n\ndef {name}(*a, **k):\n    r = _orig_{name}(*a, **k)\n"
            "    return r + 1 if type(r) in (int, float) else r\n")


def items(n_tasks: int):
    tasks = load_tasks("bundled")[:n_tasks]
    out = []
    for t in tasks:
        out.append((t.ground_truth, t.ground_truth, list(t.test_cases)))
        out.append((mutant(t.ground_truth, t.test_cases[0]), t.ground_truth, list(t.test_cases)))
    return out


def in_process(batch):
    """No isolation at all: the baseline the sandbox is compared with."""
    expected: dict[str, list] = {}
    passed = 0
    for answer, reference, tests in batch:
        if reference not in expected:
            ns: dict = {}
            exec(compile(reference, "<reference>", "exec"), ns)
            expected[reference] = [eval(c, ns) for c in tests]
        ns = {}
        exec(compile(answer, "<answer>", "exec"), ns)
        for call, exp in zip(tests, expected[reference]):
            try:
                passed += eval(call, ns) == exp
            except Exception:
                pass
    return passed


def sandboxed(batch, workers, timeout_s, fork_server, latencies):
    """Passed tests; appends each answer's evaluation time (seconds) to ``latencies``."""
    sandbox.FORK_SERVER = fork_server
    sandbox.evaluate_many([("def f():\n    return 1\n", "def f():\n    return 1\n", ["f()"])] * workers,
                          workers=workers)  # warm: start this mode's servers (none when spawning)
    sandbox._REF_CACHE.clear()
    real = sandbox.evaluate_answer

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            latencies.append(time.perf_counter() - t)

    sandbox.evaluate_answer = timed  # evaluate_many looks it up in the module
    try:
        return sum(r.passed for r in sandbox.evaluate_many(batch, workers=workers, timeout_s=timeout_s))
    finally:
        sandbox.evaluate_answer = real
        sandbox.FORK_SERVER = True


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv=None):
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100, help="bundled tasks to use (2 answers each; default 100)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel sandbox workers "
                    "(default os.cpu_count() = %(default)s)")
    ap.add_argument("--timeout-s", type=float, default=2.0, help="per-test time limit in the sandbox (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per mode; the best is reported (default 1)")
    args = ap.parse_args(argv)

    batch = items(args.tasks)
    layers = sandbox.protections()
    print(f"{len(batch)} answers x {len(batch[0][2])} tests; {os.cpu_count()} CPUs; "
          f"sandbox layers: {', '.join(layers) or 'none'}", flush=True)
    w, t_s = args.workers, args.timeout_s
    modes = [(f"fork server (workers={w})", lambda lat: sandboxed(batch, w, t_s, True, lat)),
             (f"spawn per answer ({w})", lambda lat: sandboxed(batch, w, t_s, False, lat)),
             ("fork server (workers=1)", lambda lat: sandboxed(batch, 1, t_s, True, lat)),
             ("in-process (no isolation)", lambda lat: in_process(batch))]
    rows = []
    for name, fn in modes:
        best, passed, best_lat = float("inf"), None, []
        for _ in range(args.repeat):
            lat: list[float] = []
            t = time.perf_counter()
            passed = fn(lat)
            secs = time.perf_counter() - t
            if secs < best:
                best, best_lat = secs, lat
        rows.append((name, best, passed, best_lat))
    sandbox.shutdown()
    base = len(batch) / rows[-1][1]
    print(f"{'mode':<28}{'seconds':>9}{'answers/s':>12}{'vs in-process':>15}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'tests passed':>14}")
    for name, secs, passed, lat in rows:
        rate = len(batch) / secs
        p50, p99 = (f"{1e3 * percentile(lat, q):>9.1f}" if lat else f"{'-':>9}" for q in (0.5, 0.99))
        print(f"{name:<28}{secs:>9.2f}{rate:>12.1f}{rate / base:>14.4f}x{p50}{p99}{passed:>14}")
    print(f"fork server / spawn per answer at {w} workers: {rows[1][1] / rows[0][1]:.1f}x the answers/s")
    if len({p for _, _, p, _ in rows}) != 1:
        print("warning: the modes disagree on the number of tests passed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
