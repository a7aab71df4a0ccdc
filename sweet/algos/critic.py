"""SWEET-RL critic: the base LM, fine-tuned, whose own head gives per-turn advantages (paper Eq. 2-3; the losses
are in `losses.py`): log-probs on a LM, the critic's data and trainer, and scoring candidate actions with it.

LoRA (default): the reference policy pi_ref is the same weights with the adapter disabled, so there is never a
second model copy. Full fine-tuning (`cfg.lora=False`): pi_ref is a frozen copy of the initial model, reached through
the same `disable_adapter()` call (`training.FullFTModel`). The value-head ablation lives in `value_head.py`;
`scoring.load_any_critic` / `scoring.score_any` serve both kinds to callers that should not care which one they hold.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate.utils import extract_model_from_parallel
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments

from sweet.algos.dialogue import (encode_all, fit_dialogue, mask_from_lengths, pad_rows, tokenize_dialogue,
                                  turn_index, with_training_info)
from sweet.algos.losses import (bt_loss_official, bt_loss_paper, nll_loss, trajectory_advantage_official,
                                turn_advantages)
from sweet.algos.training import (FullFTModel, LossTrainer, checkpoint_dir, local_model_path, run_training,
                                  trainable_model, training_kwargs)
from sweet.config import CriticConfig
from sweet.models import model_dtype, pick_device
from sweet.precision import autocast

DONE_FILE = "critic_config.json"  # written last into `out_dir/critic`: the output is complete


# ------------------------------------------------------------------------------------------ log-probs on a LM
def _decoder(model):
    return (model.get_base_model() if isinstance(model, PeftModel) else model).get_decoder()


def _lm_parts(model):
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    cfg = base.config.get_text_config()
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        raise ValueError(f"{type(base).__name__} post-processes its logits; token_logps reads the head raw")
    return base.get_decoder(), base.get_output_embeddings()


@functools.cache
def _cache_arg(decoder_class: type) -> str:
    # Newer transformers name the KV-cache argument and output `cache`, older ones (the < 5.21 that vLLM 0.33 pins)
    # `past_key_values`.
    return "cache" if "cache" in inspect.signature(decoder_class.forward).parameters else "past_key_values"


def decode(decoder, input_ids, attention_mask=None, cache=None):
    """(last hidden states, KV cache) of `decoder`, continuing `cache` if given, under either transformers' names."""
    name = _cache_arg(type(decoder))
    extra = {name: cache} if cache is not None else {}
    out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **extra)
    return out.last_hidden_state, getattr(out, name)


def last_hidden(model, decoder, input_ids, attention_mask, cache=None, **inputs) -> torch.Tensor:
    """The decoder's final (normed) hidden states. Without a cache this goes through `model`'s own forward -- the
    wrapper DDP, FSDP or DeepSpeed put around it syncs gradients and gathers shards only there -- with logits for
    one position, the states taken from `decoder`'s output by a hook (asking for every layer's hidden states would
    keep them all alive in the no-grad reference pass). Cached scoring (inference only) calls the decoder.
    `inputs`: more inputs of `model`'s forward (a vision-language model's pixel_values, image_grid_thw, ...)."""
    if cache is not None:
        if inputs:
            raise ValueError("last_hidden: a cached prefix is decoded by the text decoder alone, without "
                             f"{sorted(inputs)}")
        return decode(decoder, input_ids, attention_mask, cache)[0]
    seen = []
    hook = decoder.register_forward_hook(lambda _module, _args, out: seen.append(out.last_hidden_state))
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1, use_cache=False, **inputs)
    finally:
        hook.remove()
    return seen[-1]


def token_logps(model, input_ids, attention_mask, target_mask, cache=None) -> torch.Tensor:
    """[B, T] log p(input_ids[:, p] | input_ids[:, <p]) where target_mask[:, p], else 0.

    The head runs only on the positions that predict a target token: a 150k vocabulary over every position would
    dominate memory on CPU. With `cache`, input_ids continue the cached prefix (column 0 is never a target).
    """
    decoder, head = _lm_parts(extract_model_from_parallel(model))
    hidden = last_hidden(model, decoder, input_ids, attention_mask, cache)
    sel = target_mask[:, 1:].bool()
    logits = head(hidden[:, :-1][sel]).float()
    vals = logits.log_softmax(-1).gather(-1, input_ids[:, 1:][sel].unsqueeze(-1)).squeeze(-1)
    full = F.pad(sel, (1, 0))
    return torch.zeros(input_ids.shape, dtype=vals.dtype, device=vals.device).masked_scatter(full, vals)


# ------------------------------------------------------------------------------------------------ training
def encode_pair(tokenizer, pair: dict, cfg: CriticConfig) -> dict:
    """Pair dict -> token ids + per-token turn index (-1 outside assistant turns) for chosen and rejected."""
    for key in ("chosen", "rejected", "training_info"):
        if key not in pair:
            raise KeyError(f"critic pair is missing {key!r} (expects chosen, rejected, training_info)")
    out = {}
    for side in ("chosen", "rejected"):
        msgs = pair[side]
        if cfg.use_training_info:
            msgs = with_training_info(msgs, pair["training_info"])
        tok = tokenize_dialogue(tokenizer, msgs, cfg.max_length)
        if not tok["turn_spans"]:
            raise ValueError(f"critic pair: the {side} trajectory has no assistant turn")
        out[f"{side}_ids"], out[f"{side}_turns"] = tok["input_ids"], turn_index(len(tok["input_ids"]),
                                                                                  tok["turn_spans"])
    return out


def collate_pairs(rows: list[dict], pad_id: int) -> dict:
    """Chosen rows first, then rejected, padded together; the mask comes from lengths (pad may equal eos)."""
    ids = [r["chosen_ids"] for r in rows] + [r["rejected_ids"] for r in rows]
    turns = [r["chosen_turns"] for r in rows] + [r["rejected_turns"] for r in rows]
    return {"input_ids": pad_rows(ids, pad_id), "turn_ids": pad_rows(turns, -1),
            "attention_mask": mask_from_lengths([len(i) for i in ids])}


def trajectory_scores(token_logratio: torch.Tensor, turn_ids: torch.Tensor, variant: str, length_norm: bool):
    """(per-turn advantages [B, turns] or None, each trajectory's score [B]): what the BT loss compares. Variant
    'paper': Eq. 2's advantage per turn, summed over turns (Eq. 3); 'official': the released code's one token mean."""
    if variant == "paper":
        adv = turn_advantages(token_logratio, turn_ids, int(turn_ids.max()) + 1, length_norm)
        return adv, adv.sum(-1)
    return None, trajectory_advantage_official(token_logratio, turn_ids >= 0, length_norm)


class CriticTrainer(LossTrainer):
    """Trainer whose loss is the critic's Bradley-Terry loss over (chosen, rejected) trajectory pairs (Eq. 3, or the
    released variant) plus `cfg.nll_coef` times the NLL of the chosen trajectories."""

    def __init__(self, *args, critic_cfg: CriticConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.critic_cfg = critic_cfg

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        cfg, (m, switch) = self.critic_cfg, self.policy_and_reference(model)
        ids, attn, turn_ids = inputs["input_ids"], inputs["attention_mask"], inputs["turn_ids"]
        target = turn_ids >= 0
        logp = token_logps(m, ids, attn, target)
        with torch.no_grad(), switch.disable_adapter():
            ref = token_logps(m, ids, attn, target)
        adv, score = trajectory_scores((logp - ref) * target, turn_ids, cfg.variant, cfg.length_norm)
        b = ids.shape[0] // 2
        if cfg.variant == "paper":
            bt = bt_loss_paper(adv[:b], adv[b:], cfg.beta)
        else:
            bt = bt_loss_official(score[:b], score[b:], cfg.beta)
        nll = nll_loss(logp[:b], target[:b])
        loss = bt + cfg.nll_coef * nll
        margin = (score[:b] - score[b:]).detach()
        self.record({"bt_loss": bt.item(), "nll": nll.item(), "reward_margin": margin.mean().item(),
                     "reward_accuracy": (margin > 0).float().mean().item()})
        return (loss, {"score": score.detach()}) if return_outputs else loss


def critic_trainer(pairs: list[dict], base_model: str, out_dir: Path, cfg: CriticConfig, callbacks=(),
                   device: str = "auto"):
    """(CriticTrainer, tokenizer) for the LM-head critic on (chosen, rejected, training_info) pairs: a LoRA
    (`cfg.lora`, default; pi_ref = adapter disabled) or the whole model against a frozen copy of its initial weights
    (never in the optimizer or checkpoints)."""
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    rows = encode_all(pairs, lambda p: encode_pair(tokenizer, p, cfg), "train_critic", cfg.max_length, "pairs")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model, ref_model = trainable_model(base_model, cfg, device)
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    trainer = CriticTrainer(model=model, args=args, train_dataset=rows, critic_cfg=cfg, ref_model=ref_model,
                            data_collator=lambda b: collate_pairs(b, pad_id), callbacks=list(callbacks))
    return trainer, tokenizer


def train_critic(pairs: list[dict], base_model: str, out_dir: Path, cfg: CriticConfig, callbacks=(),
                 device: str = "auto") -> Path:
    """Stage 'train critic': LM-head critic trained with the BT loss of `cfg.variant`, as a LoRA (`cfg.lora`, default)
    or fully fine-tuned against a frozen copy of the initial model; returns `out_dir/critic`."""
    if getattr(cfg, "head", "lm") != "lm":
        raise ValueError(f"train_critic trains the LM-head critic; head={cfg.head!r} is trained by "
                         "sweet.algos.value_head.train_value_critic (on trajectories with rewards, not pairs)")
    final = Path(out_dir) / "critic"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    base_model = local_model_path(base_model)
    trainer, tokenizer = critic_trainer(pairs, base_model, out_dir, cfg, callbacks, device)
    lora = getattr(cfg, "lora", True)
    return run_training(trainer, final, tokenizer,
                        lambda: write_critic_config(final, cfg, head="lm", lora=lora, base_model=base_model))


def write_critic_config(final: Path, cfg, *, head: str, lora: bool, base_model: str) -> None:
    """critic_config.json: the training config plus what loading needs (kind of head, LoRA or full, base model)."""
    conf = dict(cfg.model_dump(), head=head, lora=lora, base_model=base_model)
    (final / DONE_FILE).write_text(json.dumps(conf, indent=1))


# ------------------------------------------------------------------------------------------------- scoring
def load_critic(adapter_dir: str | Path, device: str = "auto", base_model: str | None = None):
    """(model, tokenizer) from a `train_critic` output: a PeftModel for a LoRA critic, a `FullFTModel` (trained model
    + frozen reference) for a fully fine-tuned one. The base defaults to the one the critic was trained from."""
    device, d = pick_device(device), Path(adapter_dir)
    if (d / "adapter_config.json").exists():
        base_path = base_model or json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"]
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=model_dtype(device))
        model = PeftModel.from_pretrained(base, str(d)).to(device).eval()
    elif (d / "config.json").exists() and (d / DONE_FILE).exists():
        base_path = base_model or json.loads((d / DONE_FILE).read_text())["base_model"]
        trained = AutoModelForCausalLM.from_pretrained(d, dtype=model_dtype(device)).to(device).eval()
        reference = AutoModelForCausalLM.from_pretrained(base_path, dtype=model_dtype(device)).to(device)
        model = FullFTModel(trained, reference)
    else:
        raise FileNotFoundError(f"{d} is not a train_critic output (no adapter_config.json, no full model + "
                                "critic_config.json)")
    return model, AutoTokenizer.from_pretrained(d)


@torch.no_grad()
def score_trajectory(model, tokenizer, messages: list[dict], training_info: str, conf: dict) -> float:
    """The critic's score of a whole trajectory, as its Bradley-Terry loss compares two of them: the sum over turns
    of Eq. 2's advantage (Eq. 3, variant 'paper') or the released code's one token mean (variant 'official').
    `conf`: the critic's critic_config.json (use_training_info, length_norm, variant, max_length)."""
    return _trajectory_scores(model, tokenizer, messages, training_info, conf, conf.get("variant", "paper"))[1].item()


@torch.no_grad()
def turn_credit(model, tokenizer, messages: list[dict], training_info: str, conf: dict) -> list[float]:
    """Eq. 2's advantage of every assistant turn of a trajectory, in one forward (the reference sees c, as in
    training): where the critic puts the credit its Bradley-Terry loss gives a whole trajectory. Over `max_length`,
    early exchanges are dropped (`tokenize_dialogue`) and the list is shorter than the assistant turns."""
    return _trajectory_scores(model, tokenizer, messages, training_info, conf, "paper")[0][0].tolist()


def _trajectory_scores(model, tokenizer, messages, training_info, conf, variant):
    msgs = with_training_info(messages, training_info) if conf.get("use_training_info", True) else messages
    tok = tokenize_dialogue(tokenizer, msgs, conf.get("max_length"))
    if not tok["turn_spans"]:
        raise ValueError("score_trajectory: the trajectory has no assistant turn")
    device = next(model.parameters()).device
    ids = torch.tensor([tok["input_ids"]], device=device)
    turns = torch.tensor([turn_index(ids.shape[1], tok["turn_spans"])], device=device)
    target, attn = turns >= 0, torch.ones_like(ids)
    with autocast(device):
        logp = token_logps(model, ids, attn, target)
        with model.disable_adapter():
            ref = token_logps(model, ids, attn, target)
    return trajectory_scores((logp - ref) * target, turns, variant, conf.get("length_norm", True))


def candidate_tokens(tokenizer, history, candidates, max_length) -> tuple[list[int], list[list[int]]]:
    """(history tokens, each candidate's tokens): the history fitted to `max_length` for the longest candidate, a
    candidate's tokens its content plus its end of turn. Also what vLLM scoring reads (`vllm_scoring`)."""
    longest = max(candidates, key=lambda c: len(tokenizer(c, add_special_tokens=False)["input_ids"]))
    kept, _ = fit_dialogue(tokenizer, history + [{"role": "assistant", "content": longest}], max_length)
    history = kept[:-1]
    toks = [tokenize_dialogue(tokenizer, history + [{"role": "assistant", "content": c}]) for c in candidates]
    start = toks[0]["turn_spans"][-1][0]
    prefix = toks[0]["input_ids"][:start]
    cands = []
    for t in toks:
        s, e = t["turn_spans"][-1]
        if s != start or t["input_ids"][:s] != prefix:
            raise ValueError("candidates do not share their history's tokens; the chat template is not prefix-stable")
        cands.append(t["input_ids"][s:e])
    return prefix, cands


def candidate_inputs(model, tokenizer, history, candidates, shared_prefix, max_length):
    """One batch for N candidate actions after `history`: (input_ids, attention_mask, cache or None, offset, lengths);
    candidate i's tokens (content + end of turn) are input_ids[i, offset:offset + lengths[i]].

    shared_prefix: the history runs once into a KV cache repeated N times; else each row repeats the history.
    """
    prefix, cands = candidate_tokens(tokenizer, history, candidates, max_length)
    device, pad, n = model.device, tokenizer.pad_token_id or 0, len(cands)
    lens = [len(c) for c in cands]
    if shared_prefix:
        # Prefix minus its last token goes in the cache; that token leads each row, so row position 0 predicts
        # the candidate's first token.
        pre = torch.tensor([prefix[:-1]], device=device)
        cache = decode(_decoder(model), pre)[1]
        cache.batch_repeat_interleave(n)
        ids = pad_rows([[prefix[-1]] + c for c in cands], pad).to(device)
        attn = torch.cat([torch.ones(n, len(prefix) - 1, dtype=torch.long),
                          mask_from_lengths([1 + k for k in lens])], 1).to(device)
        return ids, attn, cache, 1, lens
    ids = pad_rows([prefix + c for c in cands], pad).to(device)
    attn = mask_from_lengths([len(prefix) + k for k in lens]).to(device)
    return ids, attn, None, len(prefix), lens


def span_mask(width: int, offset: int, lengths: list[int]) -> torch.Tensor:
    """[N, width] long mask of positions offset .. offset + lengths[i] - 1."""
    pos = torch.arange(width)[None, :]
    return ((pos >= offset) & (pos < offset + torch.tensor(lengths)[:, None])).long()


def _candidate_logps(model, tokenizer, history, candidates, shared_prefix, max_length) -> list[torch.Tensor]:
    """Per candidate, the log-probs of its tokens (content + end of turn) after `history` under `model`."""
    ids, attn, cache, off, lens = candidate_inputs(model, tokenizer, history, candidates, shared_prefix, max_length)
    lp = token_logps(model, ids, attn, span_mask(ids.shape[1], off, lens).to(ids.device), cache=cache)
    return [lp[i, off:off + k] for i, k in enumerate(lens)]


@torch.no_grad()
def score_candidates(model, tokenizer, history: list[dict], candidates: list[str], training_info: str, *,
                     length_norm: bool = True, ref_with_training_info: bool = True, use_training_info: bool = True,
                     shared_prefix: bool = True, max_length: int | None = None) -> list[float]:
    """Critic score of each candidate action a_t after `history` (ending with a user message): Eq. 2's advantage,
    mean (or sum) over the candidate's tokens of log pi_theta(.|o_t, c) - log pi_ref(.|o_t, c or not c).

    `ref_with_training_info=False` is the released code's ranking (its reference does not see c).
    """
    if not history or history[-1]["role"] != "user":
        raise ValueError("score_candidates: history must end with a user message (the turn the candidates answer)")
    if not candidates:
        return []
    hist_c = with_training_info(history, training_info) if use_training_info else history
    with autocast(model.device):
        policy = _candidate_logps(model, tokenizer, hist_c, candidates, shared_prefix, max_length)
        with model.disable_adapter():
            ref = _candidate_logps(model, tokenizer, hist_c if ref_with_training_info else history, candidates,
                                   shared_prefix, max_length)
    scores = []
    for p, r in zip(policy, ref, strict=True):
        d = (p - r).float()
        scores.append((d.mean() if length_norm else d.sum()).item())
    return scores
