"""Any trained critic, whichever head it has: load it and score candidate actions with it.

`train_critic` (LM head, LoRA or full fine-tuning), `train_value_critic` (regression head) and `train_vlm_critic`
(Qwen2-VL + regression head, reading screenshots) write different outputs; the candidates stage, best-of-N and the
diagnostics need not care which one the method trained. A 'vlm' critic is loaded with `screenshots`, a callable
from texts to PNGs (`colbench.frontend.PageScreens`), and renders the pages it reads itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sweet.algos.critic import load_critic, score_candidates, score_trajectory


@dataclass
class LoadedCritic:
    """A loaded critic of either kind; pass it to `score_any`. kind: 'lm' (advantage from the LM head, LoRA or full
    fine-tuning), 'lm-vllm' (the same, scored on vLLM) or 'value' (regression head, `value_head.py`); config: its
    critic_config.json. 'vlm' (`vlm_critic.py`): tokenizer holds its `VLMInputs`, screenshots its page renderer."""
    kind: str
    model: Any
    tokenizer: Any
    config: dict
    screenshots: Callable[[list[str]], list] | None = None


def load_any_critic(critic_dir: str | Path, device: str = "auto", cfg=None,
                    screenshots: Callable[[list[str]], list] | None = None) -> LoadedCritic:
    """Load a `train_critic` / `train_value_critic` / `train_vlm_critic` output, whichever it is
    (critic_config.json's `kind`, then `head`).

    With `cfg.engine.backend == 'vllm'`, an LM-head critic is served by vLLM (kind 'lm-vllm', `vllm_scoring`);
    value-head and vlm critics stay on transformers either way. `screenshots`: texts -> PNGs, for a vlm critic."""
    conf_file = Path(critic_dir) / "critic_config.json"
    if not conf_file.exists():
        raise FileNotFoundError(f"{critic_dir} has no critic_config.json: not a finished critic output")
    conf = json.loads(conf_file.read_text())
    kind = "vlm" if conf.get("kind", "text") == "vlm" else conf.get("head", "lm")
    if kind == "vlm":
        from sweet.algos.vlm_critic import load_vlm_critic  # lazily: it loads torch models of its own
        model, inputs = load_vlm_critic(critic_dir, device)
        return LoadedCritic(kind, model, inputs, conf, screenshots)
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
    if critic.kind == "vlm":
        return _score_vlm(critic, history, candidates, training_info, kw, flags)
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
    if critic.kind in ("value", "vlm"):
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        return score_any(critic, messages[:last], [messages[last]["content"]], training_info)[0]
    if critic.kind != "lm":
        raise ValueError(f"score_trajectory_any: a {critic.kind!r} critic does not score trajectories; load it "
                         "without an engine config (transformers)")
    return score_trajectory(critic.model, critic.tokenizer, messages, training_info, critic.config)


def _score_vlm(critic: LoadedCritic, history, candidates, training_info, kw: dict, flags: dict) -> list[float]:
    from sweet.algos.vlm_critic import score_candidates_vlm
    if critic.screenshots is None:
        raise ValueError("a 'vlm' critic reads screenshots: load it with load_any_critic(..., screenshots=...) "
                         "(colbench.frontend.PageScreens)")
    acts = [m["content"] for m in history if m["role"] == "assistant"]
    pngs = critic.screenshots(acts + list(candidates) + [training_info])
    kw.update(max_length=critic.config.get("max_length"))
    kw.update({k: v for k, v in flags.items() if k not in ("length_norm", "ref_with_training_info")})
    return score_candidates_vlm(critic.model, critic.tokenizer, history, candidates, history_images=pngs[:len(acts)],
                                candidate_images=pngs[len(acts):-1], info_image=pngs[-1], **kw)
