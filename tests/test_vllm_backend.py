"""The vLLM backend against a fake `vllm` module (no GPU, no vLLM here).

The fake stands for the part of vLLM's offline API the backend uses, with vLLM's documented behaviour:
`LLM(**engine_args).generate(prompts, sampling_params, use_tqdm=, lora_request=)` returns one RequestOutput per
prompt, in order, each with `n` CompletionOutputs (`.text`, `.token_ids`); `SamplingParams` refuses n > 1 when
greedy (temperature 0); a request with seed s samples its child j with seed s + j; `prompt_logprobs=0` gives per
prompt position a dict {token id: Logprob} holding the prompt's own token (position 0: None);
`vllm.lora.request.LoRARequest(name, int_id, path)`; `llm.llm_engine.engine_core.shutdown()` frees the engine.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
import sys
import types
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from sweet.agents import vllm_backend as vb


class FakeSamplingParams:
    def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16, seed=None, stop_token_ids=None,
                 skip_special_tokens=True, prompt_logprobs=None):
        if temperature == 0 and n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")
        self.n, self.temperature, self.top_p, self.max_tokens, self.seed = n, temperature, top_p, max_tokens, seed
        self.stop_token_ids, self.prompt_logprobs = stop_token_ids, prompt_logprobs


class FakeLoRARequest:
    def __init__(self, lora_name, lora_int_id, lora_path):
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


class FakeLLM:
    built: list["FakeLLM"] = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.shut = kwargs, [], False
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=self._shutdown))
        FakeLLM.built.append(self)

    def _shutdown(self):
        self.shut = True

    def generate(self, prompts, sampling_params, *, use_tqdm=True, lora_request=None):
        assert len(prompts) == len(sampling_params)
        self.calls.append((prompts, sampling_params, lora_request))
        outs = []
        for prompt, sp in zip(prompts, sampling_params):
            ids = prompt["prompt_token_ids"]
            if sp.prompt_logprobs is not None:
                lps = [None] + [{ids[k]: SimpleNamespace(logprob=-k / 10), ids[k] + 1: SimpleNamespace(logprob=-99.0)}
                                for k in range(1, len(ids))]
                outs.append(SimpleNamespace(outputs=[SimpleNamespace(text="", token_ids=[0])], prompt_logprobs=lps))
                continue
            last_user = "".join(map(chr, ids)).rsplit("<user>", 1)[-1].split("<")[0]
            tag = f"+{lora_request.lora_name}" if lora_request else ""
            comps = []
            for j in range(sp.n):
                draw = "greedy" if sp.temperature == 0 else random.Random(
                    None if sp.seed is None else sp.seed + j).randrange(10**9)
                comps.append(SimpleNamespace(text=f"  {last_user}:{draw}{tag} \n", token_ids=[7] * sp.max_tokens))
            outs.append(SimpleNamespace(outputs=comps, prompt_logprobs=None))
        return outs


class CharTokenizer:
    """One token per character; BOS (1) only when special tokens are added; EOS 3, <|im_end|> 2."""
    eos_token_id, unk_token_id = 3, 0

    def apply_chat_template(self, conversation, add_generation_prompt=False, tokenize=False,
                            continue_final_message=False):
        # transformers' keywords: continue_final_message leaves the last (assistant) message open.
        assert not (add_generation_prompt and continue_final_message)
        return "".join(f"<{m['role']}>{m['content']}" for m in conversation) + (
            "<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([1] if add_special_tokens else []) + [ord(c) for c in text]}

    def convert_tokens_to_ids(self, token):
        return 2 if token == "<|im_end|>" else 0


def install_fake_vllm(monkeypatch, llm_class):
    """Make `import vllm` give a module whose `LLM` is `llm_class`, and start with no engines or adapter ids."""
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = llm_class, FakeSamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(vb, "_ENGINES", {})
    monkeypatch.setattr(vb, "_LORA_IDS", {})
    llm_class.built = []
    return vllm


@pytest.fixture
def fake_vllm(monkeypatch):
    return install_fake_vllm(monkeypatch, FakeLLM)


def conv(text):
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def chat(**kw):
    return vb.VLLMChat("models/base", CharTokenizer(), **kw)


def test_samples_come_back_in_input_order_n_per_conversation(fake_vllm):
    lm = chat(tensor_parallel_size=2, gpu_memory_utilization=0.5, max_model_len=4096)
    convs = [conv("alpha"), conv("a much longer question here"), conv("b")]
    out = lm.generate(convs, max_new_tokens=5, temperature=1.0, seed=11, num_return_sequences=3)
    assert len(out) == 9
    assert [o.split(":")[0] for o in out] == ["alpha"] * 3 + ["a much longer question here"] * 3 + ["b"] * 3
    assert all(o == o.strip() for o in out)
    (llm,) = FakeLLM.built
    assert llm.kwargs["tensor_parallel_size"] == 2 and llm.kwargs["gpu_memory_utilization"] == 0.5
    assert llm.kwargs["max_model_len"] == 4096 and llm.kwargs["enable_lora"] is True
    prompts, params, lora = llm.calls[0]
    # Token ids of the chat template, without a second BOS; one SamplingParams per conversation.
    template = lm.prompt_text(convs[0])
    assert prompts[0]["prompt_token_ids"] == CharTokenizer()(template, add_special_tokens=False)["input_ids"]
    assert [(p.n, p.temperature, p.max_tokens, p.seed) for p in params] == [(3, 1.0, 5, 11), (3, 1.0, 5, 14),
                                                                           (3, 1.0, 5, 17)]
    assert params[0].stop_token_ids == [2, 3] and lora is None
    assert lm.generated_tokens == 9 * 5


def test_a_begun_assistant_message_is_continued_and_returned_whole(fake_vllm):
    # The answer prefill: the prompt ends inside the assistant's message and the reply starts with it.
    lm = chat()
    begun = conv("q") + [{"role": "assistant", "content": "I WANT TO ANSWER:"}]
    assert lm.prompt_text(begun).endswith("<assistant>I WANT TO ANSWER:")
    assert lm.prompt_text(conv("q")).endswith("<user>q<assistant>")
    (reply,) = lm.generate([begun], max_new_tokens=4)
    assert reply.startswith("I WANT TO ANSWER:") and reply.endswith("q:greedy")


def test_identical_conversations_draw_different_samples(fake_vllm):
    # k episodes of one task start from the same conversation; a shared seed would make them identical.
    out = chat().generate([conv("same")] * 4, max_new_tokens=4, temperature=1.0, seed=0, num_return_sequences=2)
    assert len(set(out)) == 8


def test_greedy_at_temperature_zero_decodes_once_and_repeats(fake_vllm):
    lm = chat()
    out = lm.generate([conv("x"), conv("yy")], max_new_tokens=4, temperature=0.0, seed=3, num_return_sequences=3)
    assert out == ["x:greedy"] * 3 + ["yy:greedy"] * 3
    params = FakeLLM.built[0].calls[0][1]
    assert [(p.n, p.temperature, p.seed) for p in params] == [(1, 0.0, None), (1, 0.0, None)]
    assert lm.generate([], max_new_tokens=4) == []


def test_lora_adapter_goes_through_a_lora_request_on_the_shared_engine(fake_vllm, tmp_path):
    adapter = tmp_path / "actor"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 32}')
    base = chat(max_lora_rank=32)  # load_chat passes max(actor.lora_r, critic.lora_r) here
    actor = chat(adapter=adapter, name="sweet")
    assert len(FakeLLM.built) == 1  # base policy and actor share the engine
    assert base.generate([conv("q")], 4)[0] == "q:greedy"
    assert actor.generate([conv("q")], 4)[0] == "q:greedy+actor"
    req = FakeLLM.built[0].calls[1][2]
    assert req.lora_path == str(adapter.resolve()) and req.lora_int_id == 1
    actor.generate([conv("q")], 4)
    assert FakeLLM.built[0].calls[2][2].lora_int_id == 1  # stable id: vLLM keeps the adapter loaded
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        chat(adapter=tmp_path)
    (adapter / "adapter_config.json").write_text('{"r": 64}')
    with pytest.raises(ValueError, match="max_lora_rank 64"):
        chat(adapter=adapter)  # the running engine was built for rank 32
    # The engine is shut down when the last backend using it is closed (closing twice counts once).
    base.close()
    base.close()
    assert not FakeLLM.built[0].shut
    actor.close()
    assert FakeLLM.built[0].shut and vb._ENGINES == {}


def test_lora_rank_rounds_up_to_what_vllm_accepts():
    assert [vb.lora_rank(r) for r in (1, 2, 16, 17, 320)] == [1, 8, 16, 32, 320]
    with pytest.raises(ValueError, match="above"):
        vb.lora_rank(1024)


def test_prompt_logprobs_per_token_with_and_without_the_critic_adapter(fake_vllm, tmp_path):
    critic = tmp_path / "critic"
    critic.mkdir()
    (critic / "adapter_config.json").write_text('{"r": 16}')
    lm = chat()
    lps = lm.prompt_logprobs(["abcd", "xy"])
    assert lps == [[-0.1, -0.2, -0.3], [-0.1]]  # the prompt's own token at each position, not another candidate
    params = FakeLLM.built[0].calls[0][1]
    assert all((p.max_tokens, p.prompt_logprobs) == (1, 0) for p in params)
    lm.prompt_logprobs(["abcd"], adapter=critic)
    assert FakeLLM.built[0].calls[1][2].lora_path == str(critic.resolve())
    with pytest.raises(ValueError, match="two tokens"):
        lm.prompt_logprobs(["a"])


class InlineReplica:
    """Stands for a replica process: runs `_execute` on its own fake engine, in this process."""
    made: list["InlineReplica"] = []

    def __init__(self, devices, engine_kwargs):
        self.devices, self.llm, self.sizes, self.closed = devices, FakeLLM(**engine_kwargs), [], False
        InlineReplica.made.append(self)

    def submit(self, fn, kind, prompts, params, lora):
        assert fn is vb._replica_execute
        self.sizes.append(len(prompts))
        fut = Future()
        fut.set_result(vb._execute(self.llm, kind, prompts, params, lora))
        return fut

    def shutdown(self, wait=True):
        self.closed = True


def test_data_parallel_splits_prompts_in_order_over_replica_gpus(fake_vllm, monkeypatch):
    InlineReplica.made = []
    monkeypatch.setattr(vb, "replica_executor", InlineReplica)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    lm = chat(tensor_parallel_size=2, data_parallel_size=2)
    assert [r.devices for r in InlineReplica.made] == ["4,5", "6,7"]
    texts = [f"q{i}" for i in range(5)]
    out = lm.generate([conv(t) for t in texts], max_new_tokens=3, temperature=1.0, seed=1, num_return_sequences=2)
    assert [o.split(":")[0] for o in out] == [t for t in texts for _ in range(2)]
    assert [r.sizes for r in InlineReplica.made] == [[3], [2]]
    assert lm.generate([conv("only")], 3) == ["only:greedy"]  # fewer prompts than replicas
    lm.close()
    assert all(r.closed for r in InlineReplica.made)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ValueError, match="needs 4 GPUs; 2 visible"):
        chat(tensor_parallel_size=2, data_parallel_size=2)


def test_split_covers_every_index_in_order():
    assert vb._split(5, 2) == [(0, 3), (3, 5)]
    assert vb._split(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_without_vllm_the_module_imports_and_building_names_the_gpu_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        chat()
    from sweet.agents import load_chat
    from sweet.config import load_config

    cfg = load_config("micro", ["engine.backend=vllm"])
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        load_chat(cfg.models.policy, cfg)  # fails before any model is resolved or loaded


def test_load_chat_routes_local_refs_to_vllm_and_leaves_api_refs(fake_vllm, monkeypatch, tmp_path):
    from sweet import models
    from sweet.agents import load_chat
    from sweet.agents.api import ChatAPI
    from sweet.config import load_config

    resolved = []
    monkeypatch.setattr(models, "resolve_model", lambda ref, models_dir=None: resolved.append(ref) or "models/x")
    monkeypatch.setattr(models, "load_tokenizer", lambda path: CharTokenizer())
    cfg = load_config("micro", ["engine.backend=vllm", "engine.tensor_parallel_size=2",
                                "engine.gpu_memory_utilization=0.6", "actor.lora_r=40"])
    lm = load_chat(cfg.models.policy, cfg, batch=8)
    assert isinstance(lm, vb.VLLMChat) and lm.batch_size == 8 and lm.device == "cuda"
    assert resolved == [cfg.models.policy]
    kw = FakeLLM.built[0].kwargs
    assert (kw["model"], kw["tensor_parallel_size"], kw["gpu_memory_utilization"]) == ("models/x", 2, 0.6)
    assert kw["max_lora_rank"] == 64 and "max_model_len" not in kw  # 0 = the model's own maximum
    api = load_chat("api:some-model@http://127.0.0.1:9/v1", cfg)
    assert isinstance(api, ChatAPI)
    api.close()
    lm.close()


def test_the_installed_vllm_accepts_what_the_backend_passes():
    # Runs where the gpu extra is installed (it imports on a CPU machine too); the fakes above follow this API.
    vllm = pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.lora.request import LoRARequest

    engine_args = {f.name for f in dataclasses.fields(EngineArgs)}
    assert {"model", "tokenizer", "tensor_parallel_size", "gpu_memory_utilization", "seed", "enable_lora",
            "max_lora_rank", "max_model_len"} <= engine_args
    sampled = vllm.SamplingParams(n=3, temperature=1.0, top_p=1.0, max_tokens=5, stop_token_ids=[2, 3],
                                  skip_special_tokens=True, seed=11)
    assert (sampled.n, sampled.seed) == (3, 11)
    assert vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0).prompt_logprobs == 0
    with pytest.raises(Exception, match="n must be 1"):  # vLLM's own VLLMValidationError
        vllm.SamplingParams(n=3, temperature=0.0)
    req = LoRARequest("critic", 1, "/adapters/critic")
    assert (req.lora_name, req.lora_int_id, req.lora_path) == ("critic", 1, "/adapters/critic")
    assert {"prompts", "sampling_params", "use_tqdm", "lora_request"} <= set(
        inspect.signature(vllm.LLM.generate).parameters)
