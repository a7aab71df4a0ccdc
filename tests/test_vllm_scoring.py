"""Critic scoring on vLLM gives the transformers scores, for LoRA and fully fine-tuned critics.

No GPU and no vLLM here: `LogprobLLM` stands for vLLM's offline `LLM` as far as prompt log-probs go, and computes
them for real with transformers -- `generate([{"prompt_token_ids": ids}], [SamplingParams(prompt_logprobs=0)],
lora_request=)` returns per prompt position k >= 1 a {token id: Logprob} holding the prompt's own token (position 0:
None), with the LoRA adapter of `lora_request.lora_path` applied when one is given. So the test checks the token
bookkeeping (which history, which span, which engine, adapter on or off), not vLLM's kernels.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from sweet.algos import critic as C
from sweet.algos.scoring import load_any_critic, score_any
from sweet.config import load_config
from tests.test_algos import CANDS, critic_model, dialogue, save_tiny_qwen2
from tests.test_vllm_backend import install_fake_vllm


class LogprobLLM:
    built: list["LogprobLLM"] = []

    def __init__(self, model, **kwargs):
        self.path, self.kwargs, self.adapters = model, kwargs, {}
        self.base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda: None))
        self.lora_calls = []
        LogprobLLM.built.append(self)

    def _model(self, lora_request):
        if lora_request is None:
            return self.base
        if lora_request.lora_path not in self.adapters:
            fresh = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32)
            self.adapters[lora_request.lora_path] = PeftModel.from_pretrained(fresh, lora_request.lora_path).eval()
        return self.adapters[lora_request.lora_path]

    @torch.no_grad()
    def generate(self, prompts, sampling_params, *, use_tqdm=True, lora_request=None):
        self.lora_calls.append(lora_request)
        model, outs = self._model(lora_request), []
        for prompt, sp in zip(prompts, sampling_params):
            assert sp.prompt_logprobs == 0 and sp.max_tokens == 1
            ids = prompt["prompt_token_ids"]
            logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
            lps = [None] + [{ids[k]: SimpleNamespace(logprob=logp[k - 1, ids[k]].item())} for k in range(1, len(ids))]
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(text="", token_ids=[0])], prompt_logprobs=lps))
        return outs


@pytest.fixture
def logprob_vllm(monkeypatch):
    return install_fake_vllm(monkeypatch, LogprobLLM)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


def lora_critic(base_dir, path):
    model, tok = critic_model(base_dir, perturb=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "critic_config.json").write_text(json.dumps({"head": "lm", "lora": True, "base_model": base_dir,
                                                         "variant": "paper", "length_norm": True,
                                                         "use_training_info": True}))
    return path


def full_critic(base_dir, path):
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(2)
    for p in model.parameters():  # a trained-looking copy: every weight moved a little
        p.data += torch.randn(p.shape, generator=g) * 0.05
    model.save_pretrained(path)
    critic_model(base_dir, perturb=False)[1].save_pretrained(path)
    (path / "critic_config.json").write_text(json.dumps({"head": "lm", "lora": False, "base_model": base_dir,
                                                         "variant": "official", "length_norm": False,
                                                         "use_training_info": True}))
    return path


@pytest.mark.parametrize("make", [lora_critic, full_critic], ids=["lora", "full-ft"])
@pytest.mark.parametrize("flags", [{}, {"ref_with_training_info": False}, {"length_norm": False},
                                   {"use_training_info": False}], ids=["trained-with", "released-ref", "sum", "no-c"])
def test_vllm_scores_equal_transformers_scores(logprob_vllm, base_dir, tmp_path, make, flags):
    critic_dir = make(base_dir, tmp_path / "critic")
    hist = dialogue(3)[:-1]
    hf = score_any(load_any_critic(critic_dir, "cpu"), hist, CANDS, "def add(a, b):\n    return a + b", **flags)
    cfg = load_config("micro", ["engine.backend=vllm"])
    on_vllm = load_any_critic(critic_dir, "cpu", cfg)
    assert on_vllm.kind == "lm-vllm"
    got = score_any(on_vllm, hist, CANDS, "def add(a, b):\n    return a + b", **flags)
    assert got == pytest.approx(hf, abs=1e-4)
    assert len(set(round(s, 4) for s in got)) > 1  # the candidates are told apart
    # A LoRA critic is one engine (base) with the adapter on and off; a full critic is two engines.
    assert len(LogprobLLM.built) == (1 if make is lora_critic else 2)
    if make is lora_critic:
        assert [r is not None for r in LogprobLLM.built[0].lora_calls] == [True, False]
    on_vllm.model.close()


def test_history_is_fitted_like_transformers_when_max_length_cuts_it(logprob_vllm, base_dir, tmp_path):
    critic_dir = lora_critic(base_dir, tmp_path / "critic")
    hist = dialogue(6)[:-1]
    hf = C.score_candidates(*C.load_critic(critic_dir, "cpu"), hist, CANDS, "c", max_length=200)
    on_vllm = load_any_critic(critic_dir, "cpu", load_config("micro", ["engine.backend=vllm"]))
    assert on_vllm.model.score(hist, CANDS, "c", max_length=200) == pytest.approx(hf, abs=1e-4)
    with pytest.raises(ValueError, match="must end with a user message"):
        on_vllm.model.score(dialogue(2), CANDS, "c")
    assert on_vllm.model.score(hist, [], "c") == []


def test_a_value_head_critic_stays_on_transformers(tmp_path, monkeypatch):
    (tmp_path / "critic_config.json").write_text(json.dumps({"head": "value"}))
    monkeypatch.setattr("sweet.algos.value_head.load_value_critic", lambda d, device: ("model", "tok"))
    loaded = load_any_critic(tmp_path, "cpu", load_config("micro", ["engine.backend=vllm"]))
    assert (loaded.kind, loaded.model) == ("value", "model")
