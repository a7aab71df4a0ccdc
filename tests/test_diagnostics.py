"""Critic diagnostics (`sweet.stages.diagnostics`): held-out pair accuracy, the best-of-N curve, and the critic's
trajectory score (`critic.score_trajectory`), which must be the score its Bradley-Terry loss compares."""

from __future__ import annotations

import itertools
import json
import statistics
from math import comb

import pytest
import torch

from sweet.algos import critic as C
from sweet.algos.scoring import load_any_critic, score_trajectory_any
from sweet.config import CriticConfig, PipelineConfig
from sweet.stages import diagnostics as D
from sweet.store import dumps
from tests.test_algos import critic_pairs, dialogue, save_tiny_qwen2


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


def test_expected_pick_is_the_mean_over_every_subset():
    rewards = [0.3, 1.0, 0.0, 0.6, 0.1]
    for n in range(1, 6):
        subsets = list(itertools.combinations(range(5), n))
        brute = statistics.fmean(rewards[min(s)] for s in subsets)  # the first in pick order is the one picked
        assert D.expected_pick(rewards, n) == pytest.approx(brute)
    assert D.expected_pick(rewards, 1) == pytest.approx(statistics.fmean(rewards))


def _eps(task: str, rewards: list[float]) -> list[dict]:
    return [{"traj_id": f"{task}__{i}", "task_id": task, "sample_idx": i, "reward": r} for i, r in enumerate(rewards)]


def test_pair_accuracy_and_best_of_n_with_a_perfect_a_reversed_and_a_blind_critic():
    groups = {"a": _eps("a", [0.0, 1.0, 0.5, 0.5]), "b": _eps("b", [0.2, 0.2, 0.2, 0.9])}
    rewards = {e["traj_id"]: e["reward"] for eps in groups.values() for e in eps}
    perfect, reversed_ = dict(rewards), {k: -v for k, v in rewards.items()}
    blind = {k: 0.0 for k in rewards}
    acc = D.pair_accuracy(groups, perfect, min_margin=0.1)
    assert acc["pairs"] == 5 + 3 and acc["tasks"] == 2 and acc["accuracy"] == 1.0  # a: 5 pairs (0.5=0.5 is not one)
    assert D.pair_accuracy(groups, reversed_, 0.1)["accuracy"] == 0.0
    assert D.pair_accuracy(groups, blind, 0.1)["accuracy"] == 0.5  # ties count half
    assert D.pair_accuracy(groups, perfect, min_margin=0.6)["pairs"] == 1 + 3  # a: 1.0 vs 0.0; b: 0.9 vs each 0.2
    curve = D.best_of_n(groups, perfect)
    assert sorted(curve) == [1, 2, 4]  # N goes as far as the samples do
    assert sorted(D.best_of_n({"a": _eps("a", [0.0, 1.0, 0.5])}, perfect)) == [1, 2, 3]  # ... and to all of them
    mean = statistics.fmean([statistics.fmean(e["reward"] for e in eps) for eps in groups.values()])
    assert curve[1]["critic"] == pytest.approx(mean) and curve[4]["critic"] == pytest.approx((1.0 + 0.9) / 2)
    assert all(v["critic"] == pytest.approx(v["oracle"]) for v in curve.values())
    worst = D.best_of_n(groups, reversed_)
    assert worst[4]["critic"] == pytest.approx((0.0 + 0.2) / 2)
    assert worst[4]["critic"] < worst[1]["critic"] < worst[4]["oracle"]


def test_best_of_n_uses_the_tasks_with_the_most_samples():
    groups = {"a": _eps("a", [0.0, 1.0]), "b": _eps("b", [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])}
    scores = {e["traj_id"]: e["reward"] for eps in groups.values() for e in eps}
    curve = D.best_of_n(groups, scores)
    assert sorted(curve) == [1, 2, 4, 8] and all(v["tasks"] == 1 for v in curve.values())  # b alone
    assert curve[1]["critic"] == pytest.approx(1 / 8) and curve[8]["critic"] == 1.0
    assert curve[2]["critic"] == pytest.approx(1 - comb(7, 2) / comb(8, 2))  # P(the 1.0 is among 2 of 8)


def test_upstream_follows_the_manifests_inputs(tmp_path):
    def stage(name: str, *inputs) -> str:
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"stage": name, "inputs": [str(i) for i in inputs]}))
        return str(d)

    trajs = stage("collect_trajectories")
    critic = stage("train_critic", stage("build_preference_pairs", trajs))
    actor = stage("train_actor", stage("sample_and_rank_candidates", trajs, critic))
    assert D.upstream(actor, "train_critic") == tmp_path / "train_critic"
    assert D.upstream(critic, "train_critic") == tmp_path / "train_critic"  # best_of_n: the system is the critic
    assert D.upstream(stage("rft_actor", trajs), "train_critic") is None
    assert D.upstream(tmp_path / "nowhere", "train_critic") is None


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_trajectory_score_is_the_score_the_bt_loss_compares(tiny_model_dir, tmp_path, variant):
    cfg = CriticConfig(variant=variant, lora_r=4, lora_alpha=8, max_length=256)
    pair = {"chosen": dialogue(3), "rejected": dialogue(1, "I WANT TO ANSWER: def f(x): return x * 2"),
            "training_info": "def add(a, b):\n    return a + b"}
    trainer, tok = C.critic_trainer([pair], tiny_model_dir, tmp_path, cfg, device="cpu")
    g = torch.Generator().manual_seed(3)
    for n, p in trainer.model.named_parameters():  # a trained-looking adapter
        if "lora_B" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5
    trainer.model.eval()
    batch = C.collate_pairs([C.encode_pair(tok, pair, cfg)], tok.pad_token_id)
    _, out = trainer.compute_loss(trainer.model, batch, return_outputs=True)
    conf = dict(cfg.model_dump())
    mine = [C.score_trajectory(trainer.model, tok, pair[s], pair["training_info"], conf)
            for s in ("chosen", "rejected")]
    assert mine == pytest.approx(out["score"].tolist(), abs=1e-5)
    assert abs(mine[0] - mine[1]) > 1e-3  # non-trivial: the adapter tells the two apart


def test_turn_credit_is_what_the_candidates_stage_scores_each_turn(tiny_model_dir, tmp_path):
    # One forward over the whole trajectory must give each turn the advantage `score_candidates` gives that action
    # after its history (reference seeing c, as the paper variant ranks), and the turns must sum to Eq. 3's score.
    cfg = CriticConfig(variant="paper", lora_r=4, lora_alpha=8, max_length=256)
    msgs, info = dialogue(3), "def add(a, b):\n    return a + b"
    trainer, tok = C.critic_trainer(critic_pairs(1), tiny_model_dir, tmp_path, cfg, device="cpu")
    g = torch.Generator().manual_seed(5)
    for n, p in trainer.model.named_parameters():  # a trained-looking adapter
        if "lora_B" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5
    model, conf = trainer.model.eval(), dict(cfg.model_dump())
    credit = C.turn_credit(model, tok, msgs, info, conf)
    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    each = [C.score_candidates(model, tok, msgs[:i], [msgs[i]["content"]], info)[0] for i in turns]
    assert len(credit) == 3 and credit == pytest.approx(each, abs=1e-4)
    assert sum(credit) == pytest.approx(C.score_trajectory(model, tok, msgs, info, conf), abs=1e-5)
    assert max(credit) - min(credit) > 1e-3  # non-trivial: the turns differ


def test_critic_diagnostics_on_a_trained_critic_writes_json_and_plot(tiny_model_dir, tmp_path):
    cfg = CriticConfig(lr=2e-2, epochs=4, batch_size=2, lora_r=4, lora_alpha=8, max_length=256)
    critic_dir = C.train_critic(critic_pairs(4), tiny_model_dir, tmp_path / "critic_stage", cfg)
    good, bad = critic_pairs(1)[0]["chosen"], critic_pairs(1)[0]["rejected"]
    info = "def add(a, b):\n    return a + b"
    rows = [{"traj_id": f"{t}__{i}", "task_id": t, "sample_idx": i, "reward": r, "messages": dumps(m),
             "training_info": info}
            for t in ("t1", "t2") for i, (m, r) in enumerate([(good, 1.0), (bad, 0.0), (bad, 0.0), (good, 1.0)])]
    rows += [{**rows[0], "traj_id": f"t3__{i}", "task_id": "t3", "sample_idx": i} for i in range(4)]  # all equal
    pcfg = PipelineConfig().model_copy(update={"models": PipelineConfig().models.model_copy(update={"device": "cpu"})})
    out = tmp_path / "eval"
    out.mkdir()
    (out / "results.md").write_text("| method | ... |\n")
    metrics = D.critic_diagnostics(pcfg, out, rows, critic_dir, run_id=None)
    report = json.loads((out / D.OUT_FILE).read_text())
    assert report["scored"] == 8  # t3's episodes all have one reward: no pick can differ, none scored
    assert metrics["critic_heldout_pairs"] == 8 and metrics["critic_heldout_pair_accuracy"] == 1.0
    assert metrics["best_of_4_reward"] == pytest.approx((1.0 + 1.0 + 1.0) / 3)
    assert metrics["best_of_1_reward"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert (out / D.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    md = (out / "results.md").read_text()
    assert md.startswith("| method") and "Pair accuracy on held-out tasks: 1.000" in md
    assert "| 4 | 1.000 | 1.000 |" in md
    critic = load_any_critic(critic_dir, "cpu")
    assert score_trajectory_any(critic, good, info) > score_trajectory_any(critic, bad, info)
    assert D.critic_diagnostics(pcfg, out, [], critic_dir, None) == metrics  # written once, read back after
