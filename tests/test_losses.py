"""Every loss of `sweet.algos.losses` by hand on small tensors, and `dpo_nll_loss` pinned to what the actor's TRL
DPOTrainer optimises on a tiny real Qwen2 (CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from sweet.algos import actor as A
from sweet.algos import losses as L
from sweet.config import ActorConfig
from tests.test_algos import dialogue, hand_completion_logps, save_tiny_qwen2
from tests.test_baselines import perturb


def neg_log_sigmoid(x: float) -> float:
    return math.log1p(math.exp(-x))


# ------------------------------------------------------------------------------------------------ the critic
def test_bradley_terry_loss_by_hand():
    loss = L.bradley_terry_loss(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 2.0]), beta=0.5)
    assert loss.item() == pytest.approx((neg_log_sigmoid(0.5 * 2) + neg_log_sigmoid(0.5 * -2)) / 2, rel=1e-6)


def test_paper_advantage_and_bt_loss_by_hand():
    # Two trajectories (rows); token log-ratios with turn ids (-1 = not an assistant token).
    ratio = torch.tensor([[9.0, 1.0, 3.0, 9.0, 2.0, 0.0], [9.0, 0.5, 0.5, 0.5, 9.0, 9.0]])
    turns = torch.tensor([[-1, 0, 0, -1, 1, -1], [-1, 0, 0, 0, -1, -1]])
    adv = L.turn_advantages(ratio, turns, n_turns=2)
    assert torch.allclose(adv, torch.tensor([[2.0, 2.0], [0.5, 0.0]]))  # (1+3)/2, 2/1 ; 1.5/3, absent turn = 0
    assert torch.allclose(L.turn_advantages(ratio, turns, 2, length_norm=False), torch.tensor([[4.0, 2.0], [1.5, 0]]))
    beta = 0.5
    # chosen = row 0 (sum 4), rejected = row 1 (sum 0.5): -log sigma(0.5 * 3.5)
    assert L.bt_loss_paper(adv[:1], adv[1:], beta).item() == pytest.approx(neg_log_sigmoid(beta * 3.5), rel=1e-6)


def test_official_advantage_and_bt_loss_by_hand():
    ratio = torch.tensor([[9.0, 1.0, 3.0, 9.0, 2.0], [9.0, 0.5, 0.5, 0.5, 9.0]])
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 1, 1, 0]])
    adv = L.trajectory_advantage_official(ratio, mask)
    assert torch.allclose(adv, torch.tensor([2.0, 0.5]))  # (1+3+2)/3 over ALL assistant tokens ; 1.5/3
    assert torch.allclose(L.trajectory_advantage_official(ratio, mask, length_norm=False), torch.tensor([6.0, 1.5]))
    assert L.bt_loss_official(adv[:1], adv[1:], beta=2.0).item() == pytest.approx(neg_log_sigmoid(2.0 * 1.5),
                                                                                   rel=1e-6)


def test_nll_is_mean_over_masked_tokens():
    logp = torch.tensor([[-1.0, -2.0, -7.0], [-3.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert L.nll_loss(logp, mask).item() == pytest.approx((1 + 2 + 3) / 3)


# ------------------------------------------------------------------------------------------------- the actor
def test_dpo_nll_loss_by_hand():
    pol_c, pol_r = torch.tensor([-4.0, -6.0]), torch.tensor([-5.0, -2.0])
    ref_c, ref_r = torch.tensor([-5.0, -6.0]), torch.tensor([-4.0, -3.0])
    chosen_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
    chosen_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    beta, coef = 0.3, 0.1
    loss, r_c, r_r = L.dpo_loss(pol_c, pol_r, ref_c, ref_r, beta)
    # Log-ratios: chosen +1, 0; rejected -1, +1. Margins 2 and -1.
    want = (neg_log_sigmoid(beta * 2) + neg_log_sigmoid(beta * -1)) / 2
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert r_c.tolist() == pytest.approx([0.3, 0.0]) and r_r.tolist() == pytest.approx([-0.3, 0.3])
    total = L.dpo_nll_loss(pol_c, pol_r, ref_c, ref_r, chosen_lp, chosen_mask, beta, coef)
    assert total.item() == pytest.approx(want + coef * (1 + 3 + 2) / 3, rel=1e-6)  # per-token mean over the batch


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2_losses"))


def dpo_nll_of(pol: dict, ref: dict, beta: float, coef: float, cut: int = 0) -> float:
    """`dpo_nll_loss` of per-token log-probs (side -> one list per row), each completion's last `cut` tokens left
    out."""
    keep = lambda x: x[:len(x) - cut]  # noqa: E731
    summed = lambda lps: torch.tensor([sum(keep(x)) for x in lps])  # noqa: E731
    chosen = [keep(x) for x in pol["chosen"]]
    width = max(len(x) for x in chosen)
    chosen_lp = torch.tensor([x + [0.0] * (width - len(x)) for x in chosen])
    chosen_mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in chosen])
    return L.dpo_nll_loss(summed(pol["chosen"]), summed(pol["rejected"]), summed(ref["chosen"]),
                          summed(ref["rejected"]), chosen_lp, chosen_mask, beta, coef).item()


def test_dpo_nll_loss_is_what_the_actor_trainer_optimises(tiny_model_dir, tmp_path):
    """The actor stage's DPOTrainer (TRL, loss_type sigmoid + sft) computes exactly `losses.dpo_nll_loss` of the
    log-probs of each completion, as the chat template renders it after the prompt, computed here by plain forwards."""
    rows = [{"prompt": dialogue(2)[:-1], "chosen": "I WANT TO ANSWER: def add(a, b): return a + b",
             "rejected": "What types?"},
            {"prompt": dialogue(1)[:-1], "chosen": "Is a negative?", "rejected": "I WANT TO ANSWER: def f(x): x"}]
    cfg = ActorConfig(lr=1e-2, epochs=1, batch_size=2, lora_r=4, lora_alpha=8, max_length=256, beta=0.5, nll_coef=0.5)
    trainer, tok = A.dpo_trainer(rows, tiny_model_dir, tmp_path, cfg, device="cpu")
    assert not trainer.args.precompute_ref_log_probs and trainer.args.loss_type == ["sigmoid", "sft"]
    model = trainer.model
    perturb(model)  # a trained-looking adapter: pi_theta != pi_ref, so the DPO term is not log 2
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, batch).item()
        pol = {s: [hand_completion_logps(model, tok, r["prompt"], r[s]) for r in rows] for s in ("chosen", "rejected")}
        with model.disable_adapter():
            ref = {s: [hand_completion_logps(model, tok, r["prompt"], r[s]) for r in rows]
                   for s in ("chosen", "rejected")}
    assert abs(sum(pol["chosen"][0]) - sum(ref["chosen"][0])) > 0.1  # the adapter moved the policy off pi_ref
    hand = dpo_nll_of(pol, ref, cfg.beta, cfg.nll_coef)
    assert abs(hand - trl_loss) < 1e-4
    # The pin discriminates: completions without their last token (ChatML's newline after <|im_end|>), or the NLL
    # as a mean of per-row means, give another value.
    assert abs(dpo_nll_of(pol, ref, cfg.beta, cfg.nll_coef, cut=1) - trl_loss) > 1e-3
    per_row_nll = sum(-sum(x) / len(x) for x in pol["chosen"]) / len(rows)
    per_row = dpo_nll_of(pol, ref, cfg.beta, 0.0) + cfg.nll_coef * per_row_nll
    assert abs(per_row - trl_loss) > 1e-3


# --------------------------------------------------------------------------------------------- the baselines
def test_sft_loss_is_mean_nll_over_all_assistant_tokens_of_the_batch():
    logp = torch.tensor([[-9.0, -1.0, -2.0, -9.0, -4.0], [-9.0, -3.0, -9.0, -9.0, -9.0]])
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 0, 0, 0]])
    # 4 assistant tokens in the batch (3 + 1): a per-token mean, not a mean of per-row means ((7/3 + 3)/2).
    assert L.sft_loss(logp, mask).item() == pytest.approx((1 + 2 + 4 + 3) / 4)


def test_mt_dpo_loss_sums_every_assistant_turn():
    # Rows: chosen policy, rejected policy; two turns each (mask runs), user tokens carry junk values.
    pol = torch.tensor([[-5.0, -1.0, -2.0, -5.0, -3.0], [-5.0, -4.0, -5.0, -1.0, -2.0]])
    ref = torch.tensor([[-5.0, -2.0, -2.0, -5.0, -4.0], [-5.0, -3.0, -5.0, -1.0, -1.0]])
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 0, 1, 1]])
    lp, lr = L.trajectory_logps(pol, mask), L.trajectory_logps(ref, mask)
    assert lp.tolist() == [-6.0, -7.0] and lr.tolist() == [-8.0, -5.0]
    beta = 0.3
    loss, r_c, r_r = L.mt_dpo_loss(lp[:1], lp[1:], lr[:1], lr[1:], beta)
    # chosen log-ratio +2 (both turns count), rejected -2: -log sigma(0.3 * 4)
    assert loss.item() == pytest.approx(neg_log_sigmoid(beta * 4), rel=1e-6)
    assert r_c.item() == pytest.approx(0.6) and r_r.item() == pytest.approx(-0.6)


# ------------------------------------------------------------------------------------------ the value head
def test_value_regression_loss_is_mse_over_present_turns():
    values = torch.tensor([[0.5, 9.0], [1.0, 0.0]])
    present = torch.tensor([[True, False], [True, True]])
    reward = torch.tensor([1.0, 0.0])
    # (0.5 - 1)^2, (1 - 0)^2, (0 - 0)^2 over 3 present turns; the absent turn's junk value is ignored.
    assert L.value_regression_loss(values, present, reward).item() == pytest.approx((0.25 + 1.0 + 0.0) / 3)
