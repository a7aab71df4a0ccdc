"""Benchmark: critic scoring of N candidates that share one multi-turn history, with and without the shared-prefix
KV cache (`score_candidates(..., shared_prefix=True/False)`), through the real critic code path.

The critic is a fresh LoRA on the chosen model whose B matrices are perturbed with a fixed seed (a zero-init B would
make every score exactly 0). Prints the seconds of each mode, the speed-up and the largest score difference; exits
with status 1 if the two modes disagree by 1e-4 or more.

    .venv/bin/python bench/shared_prefix_scoring.py                      # SmolLM2-135M, 16 candidates
    .venv/bin/python bench/shared_prefix_scoring.py --model Qwen/Qwen2.5-Coder-0.5B-Instruct --head value
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOLERANCE = 1e-4
WORDS = ("list dict value key sorted negative input return string integer empty default order case first last "
         "count duplicate filter length raise error none zero index window merge").split()


def build_dialogue(n_exchanges: int, rng: random.Random) -> tuple[list[dict], str]:
    """A ColBench-like backend history ending with a user message, and the reference code c."""
    words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    msgs = [{"role": "system", "content": "You are a helpful coding agent. Ask clarifying questions about the task, "
             "then write the final function after 'I WANT TO ANSWER:'."},
            {"role": "user", "content": "Write a Python function `group_scores(records, window=3)` that groups the "
             "records by key and returns rolling statistics. " + words(60)}]
    for t in range(n_exchanges):
        msgs += [{"role": "assistant", "content": f"Question {t + 1}: should the function {words(18)}?"},
                 {"role": "user", "content": f"Yes, it should {words(20)}. Otherwise {words(8)}."}]
    ref = ("def group_scores(records, window=3):\n    out = {}\n    for key, value in records:\n"
           "        out.setdefault(key, []).append(value)\n"
           "    return {k: [sum(v[max(0, i - window + 1):i + 1]) / min(i + 1, window) for i in range(len(v))]"
           " for k, v in sorted(out.items())}\n")
    return msgs, ref


def build_candidates(n: int, rng: random.Random) -> list[str]:
    words = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    out = []
    for i in range(n):
        if i % 2:
            out.append(f"Should the result {words(rng.randint(8, 30))}?")
        else:
            body = "\n".join(f"    # {words(rng.randint(3, 9))}" for _ in range(rng.randint(2, 6)))
            out.append(f"I WANT TO ANSWER:\ndef group_scores(records, window=3):\n{body}\n    return {{}}")
    return out


def build_critic(model_path: str, head: str, seed: int, scale: float):
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sweet.algos import critic as C
    from sweet.algos import value_head as V
    from sweet.algos.training import lora_config

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    torch.manual_seed(seed)  # LoRA A is initialised from torch's global generator
    if head == "value":
        V.attach_value_head(base)
        model = get_peft_model(base, V.value_lora_config(16, 32))
    else:
        model = get_peft_model(base, lora_config(16, 32))
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_B" in name or "modules_to_save" in name:
            p.data = torch.randn(p.shape, generator=g) * scale
    tok = AutoTokenizer.from_pretrained(model_path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                    help="model id/alias or folder, resolved with sweet.models.resolve_model (default: %(default)s)")
    ap.add_argument("--models-dir", default=str(ROOT / "artifacts" / "models"), help="converted models folder")
    ap.add_argument("--head", choices=("lm", "value"), default="lm",
                    help="lm: SWEET-RL advantage (critic + reference pass); value: value-head critic")
    ap.add_argument("-n", "--candidates", type=int, default=16, help="candidates per history (default: 16)")
    ap.add_argument("--exchanges", type=int, default=4, help="question/answer exchanges in the history (default: 4)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per mode; the fastest is reported")
    ap.add_argument("--scale", type=float, default=0.02, help="std of the perturbed LoRA B / head weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)

    import torch

    from sweet.algos import critic as C
    from sweet.algos import value_head as V
    from sweet.algos.training import lora_config
    from sweet.algos.dialogue import tokenize_dialogue, with_training_info
    from sweet.models import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    history, ref_code = build_dialogue(args.exchanges, rng)
    cands = build_candidates(args.candidates, rng)
    path = resolve_model(args.model, args.models_dir)
    model, tok = build_critic(path, args.head, args.seed, args.scale)
    if args.head == "value":
        score = lambda shared, cs=cands: V.score_candidates_value(model, tok, history, cs, ref_code,  # noqa: E731
                                                                  shared_prefix=shared)
    else:
        score = lambda shared, cs=cands: C.score_candidates(model, tok, history, cs, ref_code,  # noqa: E731
                                                            shared_prefix=shared)
    n_prefix = tokenize_dialogue(tok, with_training_info(history, ref_code) + [{"role": "assistant", "content": ""}])
    n_prefix = n_prefix["turn_spans"][-1][0]
    cand_lens = [len(tok(c, add_special_tokens=False)["input_ids"]) + 1 for c in cands]
    print(f"model {path}\nhead {args.head}, {len(cands)} candidates of {min(cand_lens)}-{max(cand_lens)} tokens "
          f"(mean {sum(cand_lens) / len(cand_lens):.0f}), shared history of {n_prefix} tokens "
          f"(c + {len(history)} messages), torch threads {torch.get_num_threads()}")
    score(True, cands[:1])  # warm-up (first-call allocations), untimed
    results, times = {}, {}
    for shared in (False, True):
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            results[shared] = score(shared)
            best = min(best, time.perf_counter() - t0)
        times[shared] = best
    diff = max(abs(a - b) for a, b in zip(results[True], results[False]))
    print(f"{'mode':<24}{'seconds':>10}")
    print(f"{'independent rows':<24}{times[False]:>10.2f}")
    print(f"{'shared-prefix cache':<24}{times[True]:>10.2f}")
    print(f"speed-up {times[False] / times[True]:.2f}x   max |score difference| {diff:.2e} (tolerance {TOLERANCE:g})")
    print("scores (shared): " + " ".join(f"{s:+.4f}" for s in results[True]))
    if diff >= TOLERANCE:
        print(f"FAIL: the two modes differ by {diff:.2e} >= {TOLERANCE:g}", file=sys.stderr)
        return 1
    if len({round(s, 6) for s in results[True]}) < 2:
        print("FAIL: scores are all equal; the perturbed critic should separate candidates", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
