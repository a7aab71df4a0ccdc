"""Critic scoring on vLLM (engine.backend=vllm): Eq. 2's advantage from prompt log-probs instead of forward passes.

score(a) = mean (or sum) over a's tokens of log pi_theta(a^l | o_t, c, a^<l) - log pi_ref(a^l | o_t, [c], a^<l), the
same quantity as `critic.score_candidates`, over the same tokens (`critic.candidate_tokens`: the history fitted to
max_length, the candidate's content plus its end of turn). vLLM returns log p of every prompt token given its prefix
(`VLLMChat.prompt_logprobs`); the candidate's span is read off. A LoRA critic is one engine of the base model with
the critic's adapter on (pi_theta) or off (pi_ref); a fully fine-tuned critic is an engine of its own weights next to
one of the base model. Value-head critics are scored by transformers (`scoring.load_any_critic`).
"""

from __future__ import annotations

from pathlib import Path

from sweet.algos.critic import candidate_tokens
from sweet.algos.dialogue import with_training_info


class VLLMCritic:
    """A trained LM-head critic (critic_config.json `conf`) served by vLLM engines with `cfg.engine`'s settings."""

    def __init__(self, critic_dir: str | Path, conf: dict, cfg):
        from sweet import models
        from sweet.agents.vllm_backend import VLLMChat

        critic_dir = Path(critic_dir)
        self.tokenizer = models.load_tokenizer(str(critic_dir))
        self.reference = VLLMChat.load(conf["base_model"], cfg)
        if conf.get("lora", True):
            self.policy, self.adapter = self.reference, str(critic_dir)
        else:
            self.policy, self.adapter = VLLMChat.load(str(critic_dir), cfg), None

    def score(self, history: list[dict], candidates: list[str], training_info: str, *, length_norm: bool = True,
              ref_with_training_info: bool = True, use_training_info: bool = True,
              max_length: int | None = None) -> list[float]:
        if not history or history[-1]["role"] != "user":
            raise ValueError("VLLMCritic.score: history must end with a user message (the turn the candidates "
                             "answer)")
        if not candidates:
            return []
        hist_c = with_training_info(history, training_info) if use_training_info else history
        policy = self._candidate_logps(self.policy, self.adapter, hist_c, candidates, max_length)
        ref = self._candidate_logps(self.reference, None, hist_c if ref_with_training_info else history,
                                    candidates, max_length)
        scores = []
        for p, r in zip(policy, ref, strict=True):
            d = [a - b for a, b in zip(p, r, strict=True)]
            scores.append(sum(d) / len(d) if length_norm else sum(d))
        return scores

    def _candidate_logps(self, engine, adapter, history, candidates, max_length) -> list[list[float]]:
        """Per candidate, log p of its tokens after `history`, cut as `critic.candidate_tokens` cuts them."""
        prefix, cands = candidate_tokens(self.tokenizer, history, candidates, max_length)
        lps = engine.prompt_logprobs([prefix + c for c in cands], adapter=adapter)
        # lps[i][k - 1] = log p(token k | tokens < k); a candidate's first token is token len(prefix) >= 1.
        return [lp[len(prefix) - 1:len(prefix) - 1 + len(c)] for lp, c in zip(lps, cands, strict=True)]

    def close(self) -> None:
        self.policy.close()
        self.reference.close()
