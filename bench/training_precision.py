"""Benchmark: a training step of the critic on the CPU in float32 vs under bf16 autocast (models.cpu_precision),
through the real critic trainer (`sweet.algos.critic.train_critic`: LoRA, Bradley-Terry over a pair of multi-turn
dialogues, the frozen reference as the adapter disabled), both measured in the same run on the same pairs.

Each precision trains `--pairs` pairs for one epoch at batch 1; the first step (allocation, warm-up) is left out and
the seconds per later step are compared. Also prints whether this CPU has AMX bf16 tiles (what `auto` reads): on a CPU
without them bf16 is expected to be slower, and `auto` keeps float32 there. Exits with status 1 if either run gives a
non-finite loss.

    .venv/bin/python bench/training_precision.py                       # Qwen2.5-Coder-0.5B, 5 pairs of ~700 tokens
    .venv/bin/python bench/training_precision.py --model HuggingFaceTB/SmolLM2-135M-Instruct --pairs 8
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("list dict value key sorted negative input return string integer empty default order case first last "
         "count duplicate filter length raise error none zero index window merge").split()


def build_pairs(n: int, words_per_turn: int, rng: random.Random) -> list[dict]:
    """n (chosen, rejected) three-turn backend dialogues of about the laptop profile's length, with c."""
    words = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    out = []
    for i in range(n):
        def dialogue(answer: str) -> list[dict]:
            return [{"role": "user", "content": f"Write `f{i}(records)` that {words(words_per_turn)}."},
                    {"role": "assistant", "content": f"Should it {words(words_per_turn // 2)}?"},
                    {"role": "user", "content": f"Yes, {words(words_per_turn // 2)}."},
                    {"role": "assistant", "content": answer}]
        body = "\n".join(f"    # {words(8)}" for _ in range(6))
        out.append({"chosen": dialogue(f"I WANT TO ANSWER:\n```python\ndef f{i}(records):\n{body}\n    return []\n```"),
                    "rejected": dialogue(f"I think it should {words(words_per_turn)}."),
                    "training_info": f"def f{i}(records):\n    return sorted(records)[:3]\n"})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct")
    parser.add_argument("--pairs", type=int, default=5, help="pairs = steps per precision (the first is left out)")
    parser.add_argument("--words", type=int, default=80, help="words per user turn (sets the dialogue length)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from transformers import TrainerCallback

    from sweet import models, precision
    from sweet.algos import critic as C
    from sweet.config import CriticConfig

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self.losses = [time.perf_counter()], []

        def on_step_end(self, *_a, **_k):
            self.times.append(time.perf_counter())

        def on_log(self, _args, _state, _control, logs=None, **_k):
            if logs and "bt_loss" in logs:
                self.losses.append(logs["bt_loss"])

    base = models.resolve_model(args.model, "artifacts/models")
    pairs = build_pairs(args.pairs, args.words, random.Random(args.seed))
    cfg = CriticConfig(epochs=1, batch_size=1, grad_accum=1, save_steps=10_000, max_length=1024, seed=args.seed)
    print(f"CPU has AMX bf16 tiles: {precision.cpu_has_amx_bf16()} (models.cpu_precision=auto -> "
          f"{precision.resolve_cpu_precision('auto')})")
    per_step, ok = {}, True
    for mode in ("fp32", "bf16"):
        precision.set_cpu_precision(mode)
        rec = StepTimes()
        with tempfile.TemporaryDirectory() as tmp:
            C.train_critic(pairs, base, Path(tmp), cfg, callbacks=[rec], device="cpu")
        steps = [b - a for a, b in zip(rec.times[1:], rec.times[2:])]  # step 1 (warm-up) left out
        per_step[mode] = sum(steps) / len(steps)
        ok &= all(math.isfinite(x) for x in rec.losses)
        print(f"{mode}: {per_step[mode]:.2f} s per step over steps 2-{len(rec.times) - 1} "
              f"(BT losses {', '.join(f'{x:.3f}' for x in rec.losses)})")
    print(f"bf16 autocast vs float32: {per_step['fp32'] / per_step['bf16']:.2f}x faster per step")
    precision.set_cpu_precision("fp32")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
