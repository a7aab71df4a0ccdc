"""Any trained critic, whichever head it has: load it and score candidate actions with it.

`train_critic` (LM head, LoRA or full fine-tuning) and `train_value_critic` (regression head) write different
outputs; the candidates stage and best-of-N need not care which one the method trained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweet.algos.critic import load_critic, score_candidates, score_trajectory


@dataclass
class LoadedCritic:
    """A loaded critic of either kind; pass it to `score_any`. kind: 'lm' (advantage from the LM head, LoRA or full
    fine-tuning), 'lm-vllm' (the same, scored on vLLM) or 'value' (regression head, `value_head.py`); config: its
    critic_config.json."""
    kind: str
    model: Any
    tokenizer: Any
    config: dict


def load_any_critic(critic_dir: str | Path, device: str = "auto", cfg=None) -> LoadedCritic:
    """Load a `train_critic` / `train_value_critic` output, whichever it is (critic_config.json's `head`).

    With `cfg.engine.backend == 'vllm'`, an LM-head critic is served by vLLM (kind 'lm-vllm', `vllm_scoring`);
    a value-head critic stays on transformers either way."""
    conf_file = Path(critic_dir) / "critic_config.json"
    if not conf_file.exists():
        raise FileNotFoundError(f"{critic_dir} has no critic_config.json: not a finished critic output")
    conf = json.loads(conf_file.read_text())
    kind = conf.get("head", "lm")
    if kind == "value":
        from sweet.algos.value_head import load_value_critic  # lazily: it loads torch models of its own
        model, tok = load_value_critic(critic_dir, device)
    elif kind == "lm" and cfg is not None and cfg.engine.backend == "vllm":
        from sweet.algos.vllm_scoring import VLLMCritic  # lazily: vLLM is an optional dependency

        vc = VLLMCritic(critic_dir, conf, cfg)
        return LoadedCritic("lm-vllm", vc, vc.tokenizer, conf)
    elif kind == "lm":
        model, tok = load_critic(critic_dir, device)
    else:
        raise ValueError(f"{conf_file}: unknown critic head {kind!r} (expects 'lm' or 'value')")
    return LoadedCritic(kind, model, tok, conf)


def score_any(critic: LoadedCritic, history: list[dict], candidates: list[str], training_info: str,
              **flags) -> list[float]:
    """Scores of `candidates` after `history` from a critic of either kind (higher = better action).

    Flags left out default to what the critic was trained with: use_training_info, length_norm, and
    ref_with_training_info = (variant == 'paper'; the released code's reference does not see c). A value critic
    ignores the LM-only flags (length_norm, ref_with_training_info); unknown flags raise TypeError.
    """
    conf = critic.config
    kw: dict[str, Any] = {"use_training_info": conf.get("use_training_info", True)}
    if critic.kind == "value":
        from sweet.algos.value_head import score_candidates_value
        kw.update({k: v for k, v in flags.items() if k not in ("length_norm", "ref_with_training_info")})
        return score_candidates_value(critic.model, critic.tokenizer, history, candidates, training_info, **kw)
    kw.update(length_norm=conf.get("length_norm", True), ref_with_training_info=conf.get("variant", "paper") == "paper")
    kw.update(flags)
    if critic.kind == "lm-vllm":
        return critic.model.score(history, candidates, training_info, **kw)
    return score_candidates(critic.model, critic.tokenizer, history, candidates, training_info, **kw)


def score_trajectory_any(critic: LoadedCritic, messages: list[dict], training_info: str) -> float:
    """A whole trajectory's score from a critic of either kind (higher = better): an LM critic's trajectory advantage
    (`critic.score_trajectory`, as its BT loss compares trajectories); a value critic's V of the final action."""
    if critic.kind == "value":
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        return score_any(critic, messages[:last], [messages[last]["content"]], training_info)[0]
    if critic.kind != "lm":
        raise ValueError(f"score_trajectory_any: a {critic.kind!r} critic does not score trajectories; load it "
                         "without an engine config (transformers)")
    return score_trajectory(critic.model, critic.tokenizer, messages, training_info, critic.config)
