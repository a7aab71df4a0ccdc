"""The contract between the environments and whatever generates text (local models, vLLM, an API).

A chat backend has `generate(conversations, max_new_tokens, temperature, seed) -> list[str]`, one completion per
conversation, in order. A completion that finally could not be produced is a `GenerationFailure`: an empty string
that says why, so an environment can end that episode with the reason recorded instead of dropping it. This module
sits below both the environments and the agents, so neither has to import the other.
"""

from __future__ import annotations


class GenerationFailure(str):
    """An empty completion standing in for a request that finally failed; `.reason` says why."""

    def __new__(cls, reason: str):
        self = super().__new__(cls, "")
        self.reason = reason
        return self

    def __getnewargs__(self):
        return (self.reason,)

    def __repr__(self):
        return f"GenerationFailure({self.reason!r})"


def prompt_length(messages: list[dict]) -> int:
    """How many of a dialogue's messages open it (an optional system message, then the task's user message)."""
    return 2 if messages and messages[0]["role"] == "system" else 1


def prefill_of(conversation: list[dict]) -> str | None:
    """The start of the reply when a conversation ends with an assistant message (the backend continues that
    message, a "prefill"), else None."""
    return conversation[-1]["content"] if conversation and conversation[-1]["role"] == "assistant" else None


def template_options(conversation: list[dict]) -> dict:
    """`apply_chat_template` keywords: continue a begun assistant message, else open a new one. Only the
    keyword that applies is passed, so older tokenizers without `continue_final_message` still work."""
    if prefill_of(conversation) is not None:
        return {"continue_final_message": True, "add_generation_prompt": False}
    return {"add_generation_prompt": True}


def whole_reply(conversation: list[dict], completion: str) -> str:
    """A completion as the whole assistant message: a continued conversation's prefill plus what was generated
    (servers that echo the prefill, as llama-server does, are not doubled). Failures stay failures."""
    prefill = prefill_of(conversation)
    if prefill is None or isinstance(completion, GenerationFailure) or completion.startswith(prefill):
        return completion
    return prefill + completion
