"""Critic ranking, checked on trained critics.

Fast (tiny Qwen2): candidate ranking reads exactly the quantity the critic's BT loss trains (per-turn mean token
log-ratio, reference given c), so "chosen pushed up" means "ranked up".

Slow (the real SmolLM2-135M-Instruct, converted into artifacts/models on first use): a critic LoRA-trained
with the `micro` profile's critic settings (lr 2e-4, beta 1, batch 2, 1 epoch, paper variant) on 12 hand-built pairs
over the bundled "easy" train tasks (chosen = the reference answer in the answer protocol, rejected = a plausible
wrong function or prose restating the task) ranks, given c, the reference answer above a wrong answer and above
prose on the two held-out easy tasks, in 1- and 2-turn dialogues. Measured: reference ~0.12-0.19, wrong
~0.05-0.11, prose ~-0.16..-0.19 nats/token; with another task's c the reference loses its lead. Why hand-built
pairs: the stored micro run's critic saw 2 pairs of one task (one optimizer step) of SmolLM2's own noisy
trajectories and scores the reference answer BELOW a wrong answer and prose on every task; 4 clean pairs (2 steps)
already order held-out answers right but with a reference-vs-wrong margin of only ~0.02-0.03, hence 12 (6 steps).
Training takes ~2.5 min on 2 busy cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sweet.algos import critic as C
from sweet.algos.losses import turn_advantages
from sweet.colbench.backend import LAST_TURN_NOTE, Episode
from sweet.config import CriticConfig
from sweet.models import resolve_model
from tests.test_algos import critic_model, dialogue, save_tiny_qwen2

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / "artifacts/models/smollm2-135m-instruct"
EASY = ROOT / "sweet/colbench/data/easy_tasks.jsonl"


# A plausible wrong body per easy task (same signature, runs, fails the tests).
WRONG_BODY = {"ez-01": "return a - b", "ez-02": "return -x", "ez-03": "return min(a, b, c)", "ez-04": "return x * 2",
              "ez-05": "return n % 2 == 1", "ez-06": "return s", "ez-07": "return x + 2", "ez-08": "return len(s)"}
TRAIN = ("ez-01", "ez-02", "ez-03", "ez-04", "ez-06", "ez-08")
HELD_OUT = ("ez-05", "ez-07")


def tasks() -> dict[str, dict]:
    return {r["task_id"]: r for r in map(json.loads, EASY.read_text().splitlines())}


def answer(code: str) -> str:
    return f"I WANT TO ANSWER:\n```python\n{code.strip()}\n```"


def finals(task: dict) -> dict[str, str]:
    """The three final answers compared: the reference, a wrong function, prose restating the task (no code)."""
    signature = task["ground_truth"].splitlines()[0]
    return {"reference": answer(task["ground_truth"]),
            "wrong": answer(f"{signature}\n    {WRONG_BODY[task['task_id']]}"),
            "prose": f"The task description is:\n\n{task['problem_description']}\n\nThe function is a simple function "
                     "that takes the input and returns the result."}


def history(task: dict, turns: int) -> list[dict]:
    """The agent's prompt as collection writes it; with 2 turns, one question and the simulator's reply first."""
    prompt = Episode.PROMPT.format(max_turns=turns, problem=task["problem_description"])
    if turns == 1:
        return [{"role": "user", "content": prompt + LAST_TURN_NOTE}]
    return [{"role": "user", "content": prompt},
            {"role": "assistant", "content": "What should the function return for invalid input?"},
            {"role": "user", "content": "Just follow the description." + LAST_TURN_NOTE}]


def pairs(all_tasks: dict) -> list[dict]:
    """12 pairs: each train task once against its wrong answer, once against prose; 1- and 2-turn dialogues."""
    out = []
    for i, tid in enumerate(TRAIN):
        t = all_tasks[tid]
        f = finals(t)
        for j, bad in enumerate(("wrong", "prose")):
            h = history(t, 1 + (i + j) % 2)
            out.append({"chosen": h + [{"role": "assistant", "content": f["reference"]}],
                        "rejected": h + [{"role": "assistant", "content": f[bad]}],
                        "training_info": t["ground_truth"]})
    return out


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


def test_ranking_reads_the_quantity_training_pushes(tiny_model_dir):
    """What the BT loss raises for tau+ (paper variant: each turn's mean token log-ratio, reference given c) is what
    candidate ranking reads: a trajectory's turn scored as a candidate after its own history equals that turn's
    advantage in the training forward, for chosen and rejected alike, so chosen-up means ranked-up."""
    model, tok = critic_model(tiny_model_dir, perturb=True)
    pair = {"chosen": dialogue(3), "rejected": dialogue(2, "What types?"), "training_info": "def add(a, b): ..."}
    batch = C.collate_pairs([C.encode_pair(tok, pair, CriticConfig())], tok.pad_token_id)
    target = batch["turn_ids"] >= 0
    with torch.no_grad():
        lp = C.token_logps(model, batch["input_ids"], batch["attention_mask"], target)
        with model.disable_adapter():
            ref = C.token_logps(model, batch["input_ids"], batch["attention_mask"], target)
    adv = turn_advantages((lp - ref) * target, batch["turn_ids"], int(batch["turn_ids"].max()) + 1)
    for row, side in enumerate(("chosen", "rejected")):
        msgs = pair[side]
        turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for k, i in enumerate(turns):
            ranked = C.score_candidates(model, tok, msgs[:i], [msgs[i]["content"]], pair["training_info"])[0]
            assert ranked == pytest.approx(adv[row, k].item(), abs=1e-5), (side, k)
    assert adv[0].abs().sum() > 0  # non-trivial: the perturbed adapter gives non-zero advantages


@pytest.fixture(scope="module")
def trained_critic(tmp_path_factory):
    all_tasks = tasks()
    # The micro profile's critic settings (profiles.PROFILES["micro"]["critic"] over CriticConfig's defaults).
    cfg = CriticConfig(epochs=1, max_length=384, save_steps=100)
    # Converted from its offline GGUF on first use (as the end-to-end tests do), so a fresh machine runs this too.
    base = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", SMOLLM2.parent)
    out = C.train_critic(pairs(all_tasks), base, tmp_path_factory.mktemp("critic"), cfg, device="cpu")
    model, tok = C.load_critic(out, "cpu")
    return model, tok, all_tasks


@pytest.mark.parametrize("turns", [1, 2])
@pytest.mark.parametrize("task_id", HELD_OUT)
@pytest.mark.slow
def test_reference_answer_outranks_wrong_and_prose_on_held_out_tasks(trained_critic, task_id, turns):
    model, tok, all_tasks = trained_critic
    t = all_tasks[task_id]
    f = finals(t)
    s = dict(zip(f, C.score_candidates(model, tok, history(t, turns), list(f.values()), t["ground_truth"])))
    assert s["reference"] > s["wrong"] + 0.02, s  # a margin above the noise of an untrained-looking critic
    assert s["reference"] > s["prose"] + 0.02, s
    assert s["wrong"] > s["prose"], s  # code of the right shape beats prose that restates the task


@pytest.mark.slow
def test_ranking_uses_c_not_only_the_answer_shape(trained_critic):
    """Swap c: given ANOTHER task's reference, the held-out task's own reference answer keeps less of its lead over the
    wrong answer (measured: it loses it) -- the critic reads c, it did not just learn 'fenced code is good'."""
    model, tok, all_tasks = trained_critic
    t = all_tasks["ez-07"]
    f = finals(t)
    right = C.score_candidates(model, tok, history(t, 1), [f["reference"], f["wrong"]], t["ground_truth"])
    other = C.score_candidates(model, tok, history(t, 1), [f["reference"], f["wrong"]],
                               all_tasks["ez-05"]["ground_truth"])
    assert right[0] - right[1] > other[0] - other[1], (right, other)
