"""Every training objective of sweet-rl, as small pure functions of tensors (no model, no tokenizer).

Equation numbers are those of the SWEET-RL paper (arXiv 2503.15478). Shapes: B rows, T tokens, K turns. A log-ratio
is log pi_theta - log pi_ref of one token; `mask` / `turn_ids` select the tokens a loss reads (assistant tokens:
each assistant turn's content plus its end-of-turn token, see `sweet.algos.dialogue`).

Who uses what: the critic (`critic.CriticTrainer`) Eq. 2 + Eq. 3 + `nll_loss`, or the released variant; the actor
(`actor.train_dpo`, run by TRL's DPOTrainer) `dpo_nll_loss`, which this module writes out and a test pins to what
TRL optimises, or with the released run's NLL over the whole chosen sequence `dpo_loss` + `sequence_nll_loss`
(`actor.SequenceNLLTrainer`); the baselines `sft_loss` (RFT, run by TRL's SFTTrainer) and `mt_dpo_loss` + `nll_loss`
(`baselines.MultiTurnDPOTrainer`); the value-head ablation `value_regression_loss` (`value_head.ValueTrainer`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


# ------------------------------------------------------------------------------------------------ the critic
def bradley_terry_loss(score_chosen: torch.Tensor, score_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 1, the Bradley-Terry loss on trajectory pairs: -log sigma(beta (s(tau+) - s(tau-))), mean over pairs.

    `score_*` [B]: one score per trajectory (Eq. 3 and the released variant differ only in how it is built)."""
    return -F.logsigmoid(beta * (score_chosen - score_rejected)).mean()


def turn_advantages(token_logratio: torch.Tensor, turn_ids: torch.Tensor, n_turns: int,
                    length_norm: bool = True) -> torch.Tensor:
    """Eq. 2, the per-turn advantage as a mean token log-ratio:
    A(o_t, a_t, c) = (1/L) sum_l [log pi_theta(a_t^l | o_t, a_t^<l, c) - log pi_ref(a_t^l | o_t, a_t^<l, c)].

    token_logratio [B, T]; turn_ids [B, T] = turn index of each token, -1 outside assistant turns.
    Returns [B, n_turns]; turns a row does not have hold 0, so sums over turns need no mask.
    `length_norm=False` (the "no length normalisation" ablation) sums instead of averaging over the L tokens.
    """
    valid = turn_ids >= 0
    idx = turn_ids.clamp(min=0)
    zeros = token_logratio.new_zeros(token_logratio.shape[0], n_turns)
    sums = zeros.scatter_add(1, idx, token_logratio * valid)
    if not length_norm:
        return sums
    counts = zeros.scatter_add(1, idx, valid.to(token_logratio.dtype))
    return sums / counts.clamp(min=1)


def bt_loss_paper(turn_adv_chosen: torch.Tensor, turn_adv_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 3, the critic objective: Bradley-Terry (Eq. 1) over the summed turn advantages (Eq. 2),
    -log sigma(beta sum_t A(tau+_t) - beta sum_t A(tau-_t)), mean over pairs. Inputs [B, K], padded with 0."""
    return bradley_terry_loss(turn_adv_chosen.sum(-1), turn_adv_rejected.sum(-1), beta)


def trajectory_advantage_official(token_logratio: torch.Tensor, mask: torch.Tensor,
                                  length_norm: bool = True) -> torch.Tensor:
    """Released/official variant of Eq. 2-3 (the authors' code, not the paper's equations): ONE token-mean of the
    log-ratio over ALL assistant tokens of the trajectory, instead of a mean per turn summed over turns. [B]."""
    s = (token_logratio * mask).sum(-1)
    return s / mask.sum(-1).clamp(min=1) if length_norm else s


def bt_loss_official(adv_chosen: torch.Tensor, adv_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """Released/official variant of Eq. 3: Bradley-Terry (Eq. 1) on the trajectory-level token-mean advantages of
    `trajectory_advantage_official`, -log sigma(beta (A(tau+) - A(tau-))), mean over pairs. Inputs [B]."""
    return bradley_terry_loss(adv_chosen, adv_rejected, beta)


def nll_loss(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The NLL term (the critic's regulariser next to Eq. 3, the actor's next to Eq. 4): mean negative
    log-likelihood over every masked token of the batch, -sum(mask * log p) / sum(mask). A per-token mean over the
    whole batch, not a mean of per-row means: a long sequence weighs more than a short one. token_logp, mask [B, T]."""
    return -(token_logp * mask).sum() / mask.sum().clamp(min=1)


def sequence_nll_loss(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The released actor's NLL term: each row's mean negative log-likelihood over its masked tokens, averaged over
    rows (OpenRLHF's DPO trainer, `-logps_mean[:chosen].mean()`): unlike `nll_loss`, every row weighs the same.
    token_logp, mask [B, T]."""
    return -((token_logp * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


# ------------------------------------------------------------------------------------------------- the actor
def dpo_loss(pol_chosen: torch.Tensor, pol_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 4, the actor's DPO (sigmoid loss) on summed log-probs of whole completions:
    -log sigma(beta [(log pi(a+) - log pi_ref(a+)) - (log pi(a-) - log pi_ref(a-))]), mean over pairs.

    Inputs [B]: each completion's log-prob summed over its tokens. Returns (loss, chosen rewards, rejected rewards),
    a reward being beta (log pi - log pi_ref), as TRL logs it."""
    chosen, rejected = beta * (pol_chosen - ref_chosen), beta * (pol_rejected - ref_rejected)
    return -F.logsigmoid(chosen - rejected).mean(), chosen.detach(), rejected.detach()


def dpo_nll_loss(pol_chosen: torch.Tensor, pol_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                 ref_rejected: torch.Tensor, chosen_token_logp: torch.Tensor, chosen_mask: torch.Tensor,
                 beta: float, nll_coef: float) -> torch.Tensor:
    """The SWEET-RL actor's objective: Eq. 4's DPO on one turn's (chosen, rejected) actions plus nll_coef times the
    NLL term of the chosen action, `dpo_loss(...) + nll_coef * nll_loss(chosen_token_logp, chosen_mask)`.

    `actor.train_dpo` has TRL's DPOTrainer optimise it (`loss_type=["sigmoid", "sft"], loss_weights=[1, nll_coef]`;
    TRL 1.16 has no `rpo_alpha`), where a completion is the chosen (rejected) message as the chat template renders
    it after the prompt's generation header: its content, end-of-turn token and whatever the template writes after
    (ChatML: a newline). tests/test_losses.py pins this function to TRL's loss on a real model.
    pol_*/ref_* [B]: summed log-probs; chosen_token_logp, chosen_mask [B, T]: the chosen completions' tokens."""
    return dpo_loss(pol_chosen, pol_rejected, ref_chosen, ref_rejected, beta)[0] + \
        nll_coef * nll_loss(chosen_token_logp, chosen_mask)


# --------------------------------------------------------------------------------------------- the baselines
def sft_loss(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rejection fine-tuning (RFT): SFT on successful trajectories, the mean NLL over ALL assistant tokens of the
    batch (`nll_loss`; TRL SFT's per-token mean, a long trajectory weighs more than a short one). [B, T]."""
    return nll_loss(token_logp, mask)


def trajectory_logps(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(tau) = sum of the log-probs of every assistant token of every turn of tau (user tokens masked). [B]."""
    return (token_logp * mask).sum(-1)


def mt_dpo_loss(pol_chosen: torch.Tensor, pol_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-turn DPO baseline: Eq. 4 at the trajectory level (no critic), `dpo_loss` on `trajectory_logps`,
    -log sigma(beta [(log pi(tau+) - log pi_ref(tau+)) - (log pi(tau-) - log pi_ref(tau-))]), mean over pairs.
    Returns (loss, chosen rewards, rejected rewards)."""
    return dpo_loss(pol_chosen, pol_rejected, ref_chosen, ref_rejected, beta)


# ------------------------------------------------------------------------------------------ the value head
def value_regression_loss(values: torch.Tensor, present: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    """Value-head ablation (the paper's "value function" critic): MSE of every turn's value V(o_t, a_t, c) against
    its trajectory's final reward, mean over the (trajectory, turn) examples present.
    values, present [B, K]; reward [B]."""
    err = (values - reward.float()[:, None]) ** 2
    return err[present].mean()
