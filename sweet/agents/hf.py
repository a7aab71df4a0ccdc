"""A chat LM backend on transformers: batched, left-padded generation over many conversations at once.

Episodes advance in lockstep, so one call here serves every live episode of a turn; conversations are sorted by
length before batching so that padding (wasted compute on a CPU) stays small.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sweet import models
from sweet.chat import prefill_of, template_options, whole_reply


class ChatLM:
    def __init__(self, model, tokenizer, device: str = "cpu", batch_size: int = 16, name: str = ""):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.batch_size, self.name = batch_size, name
        self.tokenizer.padding_side = "left"

    @classmethod
    def load(cls, ref: str, device: str = "auto", batch_size: int = 16, adapter: str | Path | None = None,
             models_dir: str | Path = "artifacts/models") -> "ChatLM":
        device = models.pick_device(device)
        path = models.resolve_model(ref, models_dir)
        tokenizer = models.load_tokenizer(path)
        model = models.load_policy(path, adapter, device)  # the adapter (a trained actor) merged in, if any
        return cls(model, tokenizer, device, batch_size, name=str(adapter or ref))

    def prompt_text(self, conversation: list[dict]) -> str:
        # A conversation ending with an assistant message is continued (the prefill), not answered anew.
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, **template_options(conversation))

    @torch.inference_mode()
    def generate(self, conversations: list[list[dict]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, num_return_sequences: int = 1) -> list[str]:
        """One completion per conversation (or `num_return_sequences` consecutive ones per conversation)."""
        if not conversations:
            return []
        if seed is not None:
            torch.manual_seed(seed)
        texts = [self.prompt_text(c) for c in conversations]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[str]] = [[] for _ in texts]
        step = max(1, self.batch_size // num_return_sequences)
        for start in range(0, len(order), step):
            idx = order[start:start + step]
            enc = self.tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True,
                                 add_special_tokens=False).to(self.device)
            sampling = dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0) if temperature > 0 else \
                dict(do_sample=False, temperature=None, top_p=None, top_k=None)
            gen = self.model.generate(
                **enc, max_new_tokens=max_new_tokens, num_return_sequences=num_return_sequences,
                pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self._stop_ids(), **sampling)
            new = gen[:, enc["input_ids"].shape[1]:]
            decoded = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            for j, i in enumerate(idx):
                out[i] = [whole_reply(conversations[i], d.rstrip() if prefill_of(conversations[i]) else d.strip())
                          for d in decoded[j * num_return_sequences:(j + 1) * num_return_sequences]]
        return [s for group in out for s in group]

    def _stop_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return sorted(i for i in ids if i is not None)
