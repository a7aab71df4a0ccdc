#!/usr/bin/env python
"""Check the lite backend tier (`tasks.source=bundled:lite`, sweet/colbench/data/backend_lite.jsonl).

Checks, per task: the record has every field; the description ends with the reference's signature; each decision
names a literal of the reference code, states it, and the description does not; in the sandbox (child processes,
never here), the reference passes its own 10 tests with plain, non-None, not all equal outputs, and every guess runs
and fails at least 3 of the 10 tests. Across the file: unique task_ids, at least 100 train / 50 test tasks, no two
descriptions near-duplicates (3-gram Jaccard >= 0.5, as in task generation).

    .venv/bin/python scripts/validate_lite.py                 # the bundled tier
    .venv/bin/python scripts/validate_lite.py other.jsonl --first 6 --min-train 0 --min-test 0

Prints a summary and every error; exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweet.colbench import lite  # noqa: E402
from sweet.colbench.tasks import bundled_path  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", help="a JSONL file of lite records (default: the bundled tier)")
    ap.add_argument("--first", type=int, default=0, help="check only the first N records (0: all)")
    ap.add_argument("--min-train", type=int, default=lite.MIN_TRAIN)
    ap.add_argument("--min-test", type=int, default=lite.MIN_TEST)
    ap.add_argument("--min-guess-fail", type=int, default=lite.MIN_GUESS_FAIL,
                    help="tests each guess must fail (default %(default)s)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                    help="sandbox children at a time (default %(default)s)")
    a = ap.parse_args(argv)
    path = Path(a.path) if a.path else bundled_path("bundled:lite")
    try:
        records = lite.read_records(path)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.first:
        records = records[:a.first]
    t0 = time.monotonic()
    rep = lite.validate_records(records, min_train=a.min_train, min_test=a.min_test,
                                min_guess_fail=a.min_guess_fail, workers=a.workers)
    print(f"{path}")
    print(rep.summary())
    print(f"checked in {time.monotonic() - t0:.1f} s")
    for e in rep.errors:
        print(f"ERROR {e}")
    print("OK" if rep.ok else "FAILED")
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
