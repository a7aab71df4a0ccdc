"""Dialogue -> token ids with one span per assistant turn, built turn by turn with the chat template.

A span covers one assistant turn's content tokens plus its end-of-turn token (e.g. `<|im_end|>`), never the
`<|im_start|>assistant\\n` header: that is exactly what the policy emits when it takes the action a_t.
Also here: what every trainer does with such token rows (label tokens by turn, skip the too long, pad a batch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from sweet.chat import prompt_length

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]

TRAINING_INFO_HEADER = "\n\nReference solution (hidden from the agent, visible to the critic):\n"


class DialogueTooLong(ValueError):
    """Even system + problem + the final turns do not fit in `max_length` tokens."""


def with_training_info(messages: Messages, training_info: str) -> Messages:
    """Copy of `messages` whose system message also carries the training-time information c (critic only);
    a dialogue without a system message gets one that holds only c."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0], content=messages[0]["content"] + TRAINING_INFO_HEADER + training_info)
        return [first] + [dict(m) for m in messages[1:]]
    return [{"role": "system", "content": TRAINING_INFO_HEADER.lstrip() + training_info}] + [dict(m) for m in messages]


def end_of_turn_id(tokenizer) -> int:
    """The token that closes an assistant turn: `<|im_end|>` for ChatML, else the tokenizer's eos."""
    tid = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid is not None:
        return tid
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has neither <|im_end|> nor an eos token to close assistant turns")
    return tokenizer.eos_token_id


def _render(tokenizer, messages: Messages, generation_prompt: bool) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    # The template already writes every special token it wants (bos included), so add none here.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _tokenize_all(tokenizer, messages: Messages) -> dict[str, Any]:
    full = _render(tokenizer, messages, generation_prompt=False)
    eot = end_of_turn_id(tokenizer)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], generation_prompt=True)
        after = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        # Per-turn spans are only meaningful if rendering a prefix of the dialogue gives a prefix of the tokens.
        if full[: len(before)] != before or full[: len(after)] != after or len(after) <= len(before):
            raise ValueError(
                "chat template is not prefix-preserving (rendering the first turns does not give a prefix of the "
                f"whole dialogue's tokens at message {i}); per-turn masks cannot be built for this tokenizer")
        turn = after[len(before):]
        # Stop right after the last end-of-turn token: drops the trailing "\n" that ChatML writes after it.
        ends = [k for k, t in enumerate(turn) if t == eot]
        end = len(before) + (ends[-1] + 1 if ends else len(turn))
        spans.append((len(before), end))
    return {"input_ids": full, "turn_spans": spans}


def drop_old_turns(messages: Messages, n_pairs: int) -> Messages:
    """Drop the `n_pairs` oldest (assistant, user) exchanges after system + problem; keep the latest turns."""
    head = 2 if len(messages) > 1 and messages[0]["role"] == "system" else 1
    return messages[:head] + messages[head + 2 * n_pairs:]


def fit_dialogue(tokenizer, messages: Messages, max_length: int | None) -> tuple[Messages, dict[str, Any]]:
    """Shorten `messages` by whole exchanges until it fits; returns (messages kept, tokenized dialogue)."""
    out = _tokenize_all(tokenizer, messages)
    if max_length is None or len(out["input_ids"]) <= max_length:
        return messages, out
    head = prompt_length(messages)
    # Keep at least the final exchange (the last agent turn and whatever follows it).
    last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages) - 1)
    max_pairs = max(0, (last_assistant - head) // 2)
    for n in range(1, max_pairs + 1):
        kept = drop_old_turns(messages, n)
        out = _tokenize_all(tokenizer, kept)
        if len(out["input_ids"]) <= max_length:
            return kept, out
    raise DialogueTooLong(
        f"dialogue needs {len(out['input_ids'])} tokens with only system + problem + the final turn kept; "
        f"max_length is {max_length}")


def tokenize_dialogue(tokenizer, messages: Messages, max_length: int | None = None) -> dict[str, Any]:
    """Token ids of the whole dialogue and `turn_spans`: one [start, end) per kept assistant turn.

    Longer than `max_length`: whole exchanges are dropped from the start, after system + first user message.
    Raises `DialogueTooLong` when even the shortest form does not fit (never cuts inside a turn).
    """
    return fit_dialogue(tokenizer, messages, max_length)[1]


def turn_index(n_tokens: int, turn_spans: list[tuple[int, int]]) -> list[int]:
    """Per token, the index of the assistant turn it belongs to (0, 1, ...), -1 outside assistant turns."""
    turns = [-1] * n_tokens
    for k, (s, e) in enumerate(turn_spans):
        turns[s:e] = [k] * (e - s)
    return turns


def encode_all(items: list, encode: Callable[[Any], dict], name: str, max_length: int | None,
               what: str = "items") -> list[dict]:
    """`encode(item)` for every item, skipping (with one warning) those that raise `DialogueTooLong`; raises
    ValueError when none is left. `name` (the trainer) and `what` (its items) word the messages."""
    rows, skipped = [], 0
    for item in items:
        try:
            rows.append(encode(item))
        except DialogueTooLong:
            skipped += 1
    if skipped:
        log.warning("%s: skipped %d/%d %s longer than max_length=%s", name, skipped, len(items), what, max_length)
    if not rows:
        raise ValueError(f"{name}: no usable {what} ({len(items)} given, {skipped} longer than "
                         f"max_length={max_length})")
    return rows


def pad_rows(rows: list[list[int]], value: int) -> torch.Tensor:
    """[len(rows), longest] long tensor of `rows`, right-padded with `value`."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def mask_from_lengths(lengths: list[int]) -> torch.Tensor:
    """[len(lengths), max(lengths)] long attention mask, 1 on each row's first lengths[i] positions. Built from
    lengths, never from `input_ids != pad`: a tokenizer's pad token may be its eos (SmolLM2)."""
    return (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
