"""The two CPU engines run the same protocol: llama.cpp (engine.backend=llamacpp, SmolLM2-135M's Q4_1 GGUF) and
transformers (engine.backend=hf, the float32 folder converted from that very GGUF).

- Greedy dialogues of the `micro` collection protocol (agent and simulator both the model, real ColBench episodes
  and scoring): the share of identical dialogues is reported, and most first agent turns agree. llama.cpp multiplies
  with the Q4_1 weights and 8-bit activations, transformers in float32: near-tied tokens may go either way, after
  which a dialogue diverges, so identity of whole dialogues is reported rather than required.
- Sampling at temperature 1.0 on the same prompts: the mean per-token log-probability, under the torch model, of
  llama.cpp's samples is that of transformers' samples within a small tolerance (a sampler with top-k/top-p left on,
  a wrong temperature or a different template would move it by far more).
- A fully fine-tuned model folder (here: SmolLM2's folder without sweet's marker) is converted with llama.cpp's
  convert_hf_to_gguf.py to Q8_0 and served.

Real models: marked slow. Skipped when llama-server is not installed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

import pytest

from sweet.agents import _llama_server as ls
from sweet.agents import gguf_convert, llamacpp
from sweet.config import EngineConfig, ModelsConfig, PipelineConfig, load_config
from tests.conftest import MODELS_DIR

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(ls.server_binary() is None, reason="llama-server is not installed (cpu-engine)")]

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
THREADS = max(1, min(2, ls.default_threads()))


@pytest.fixture(scope="module")
def engines():
    """(transformers ChatLM, llama.cpp LlamaCppChat) of the same model; the server closed afterwards."""
    from sweet.agents.hf import ChatLM

    torch.set_num_threads(THREADS)
    cfg = PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=str(MODELS_DIR)),
                         engine=EngineConfig(backend="llamacpp", llamacpp_parallel=8, llamacpp_ctx_per_slot=2048,
                                             llamacpp_threads=THREADS))
    hf = ChatLM.load(MODEL, device="cpu", batch_size=16, models_dir=MODELS_DIR)
    lc = llamacpp.load(MODEL, cfg, batch=16)
    assert isinstance(lc, llamacpp.LlamaCppChat)
    try:
        yield hf, lc
    finally:
        lc.close()


def _episodes(n_tasks: int, k: int, max_turns: int):
    from sweet.colbench.backend import Episode
    from sweet.colbench.sources import load_tasks

    tasks = load_tasks("bundled:easy")[:n_tasks]
    return [Episode(t, i, max_turns=max_turns) for t in tasks for i in range(k)]


def _common_prefix_tokens(tok, a: str, b: str) -> int:
    x, y = tok(a, add_special_tokens=False)["input_ids"], tok(b, add_special_tokens=False)["input_ids"]
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def test_greedy_dialogues_of_the_micro_protocol(engines, record_property):
    from sweet.colbench import backend

    hf, lc = engines
    c = load_config("micro").collect
    kw = dict(max_new_tokens=c.max_new_tokens, sim_max_new_tokens=c.sim_max_new_tokens, temperature=0.0, seed=0)
    runs = {}
    for name, chat in (("hf", hf), ("llamacpp", lc)):
        eps = _episodes(6, 1, c.max_turns)
        backend.rollout(eps, chat, chat, **kw, desc=name)
        runs[name] = eps
    pairs = list(zip(runs["hf"], runs["llamacpp"]))
    same = sum(a.messages == b.messages for a, b in pairs)
    first_a = [next(m["content"] for m in a.messages if m["role"] == "assistant") for a, _ in pairs]
    first_b = [next(m["content"] for m in b.messages if m["role"] == "assistant") for _, b in pairs]
    prefix = [_common_prefix_tokens(hf.tokenizer, x, y) for x, y in zip(first_a, first_b)]
    lengths = [len(hf.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in first_a]
    share = same / len(pairs)
    record_property("identical_dialogues", f"{same}/{len(pairs)}")
    record_property("first_turn_common_prefix_tokens", prefix)
    print(f"\ngreedy micro dialogues identical across engines: {same}/{len(pairs)} ({share:.0%}); first agent turn: "
          f"common prefix {prefix} of {lengths} tokens; rewards hf {[a.reward for a, _ in pairs]} llamacpp "
          f"{[b.reward for _, b in pairs]}")
    # The first 8 tokens of most first turns agree (a broken template or stop handling would make none agree).
    assert sum(p >= min(8, n) for p, n in zip(prefix, lengths)) >= len(pairs) // 2
    assert all(b.messages[0] == a.messages[0] for a, b in pairs)  # same prompts


def _mean_logprob(hf, conv: list[dict], completion: str) -> tuple[float, int]:
    """Summed log-prob of `completion`'s tokens (plus the end of turn) after `conv`'s generation prompt, under the
    float32 torch model, and their count."""
    tok = hf.tokenizer
    p_ids = tok(hf.prompt_text(conv), add_special_tokens=False)["input_ids"]
    c_ids = tok(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p_ids + c_ids])
    with torch.no_grad():
        logp = torch.log_softmax(hf.model(ids).logits[0, :-1].float(), -1)
    picked = logp[torch.arange(len(p_ids) - 1, ids.shape[1] - 1), ids[0, len(p_ids):]]
    return picked.sum().item(), len(c_ids)


def test_samples_at_temperature_one_have_the_same_log_prob_under_torch(engines, record_property):
    hf, lc = engines
    convs = [e.messages for e in _episodes(8, 1, 2)]
    n, new = 4, 32
    stats = {}
    for name, chat in (("hf", hf), ("llamacpp", lc)):
        samples = chat.generate(convs, new, temperature=1.0, seed=7, num_return_sequences=n)
        total, count, per_seq = 0.0, 0, []
        for i, s in enumerate(samples):
            lp, k = _mean_logprob(hf, convs[i // n], s)
            if k:
                total, count = total + lp, count + k
                per_seq.append(lp / k)
        stats[name] = (total / count, statistics.pstdev(per_seq) / math.sqrt(len(per_seq)), count, len(set(samples)))
    (m_hf, se_hf, c_hf, u_hf), (m_lc, se_lc, c_lc, u_lc) = stats["hf"], stats["llamacpp"]
    record_property("mean_token_logprob", {"hf": m_hf, "llamacpp": m_lc})
    print(f"\nmean per-token log-prob under torch, temperature 1.0, {len(convs)} prompts x {n}: transformers "
          f"{m_hf:.3f} (±{se_hf:.3f}, {c_hf} tokens, {u_hf} distinct) vs llama.cpp {m_lc:.3f} (±{se_lc:.3f}, "
          f"{c_lc} tokens, {u_lc} distinct); difference {m_lc - m_hf:+.3f}")
    assert u_lc > len(convs) and u_hf > len(convs)  # sampled, not greedy
    assert abs(m_lc - m_hf) < max(0.35, 4 * math.hypot(se_hf, se_lc))


def test_a_full_model_folder_is_converted_and_served(engines, tmp_path, monkeypatch):
    """A transformers folder that is not a built-in model's (no sweet marker): convert_hf_to_gguf.py, Q8_0, cached
    by content; its greedy answer starts like the float32 model's."""
    hf, _ = engines
    from sweet import models

    src = Path(models.resolve_model(MODEL, MODELS_DIR))
    folder = tmp_path / "finetuned"
    folder.mkdir()
    for f in src.iterdir():
        if f.name != models.MARKER:
            os.symlink(f, folder / f.name)
    cfg = PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=str(tmp_path / "models")),
                         engine=EngineConfig(backend="llamacpp", llamacpp_parallel=2, llamacpp_ctx_per_slot=1024,
                                             llamacpp_threads=THREADS))
    monkeypatch.setenv(gguf_convert.SRC_ENV, str(gguf_convert.converter_dir(MODELS_DIR)))
    chat = llamacpp.load(str(folder), cfg, batch=4)
    try:
        assert isinstance(chat, llamacpp.LlamaCppChat)
        served = chat.server.model
        assert served.parent == tmp_path / "models" / "gguf" / "converted"
        assert json.loads(served.with_suffix(".json").read_text())["outtype"] == "q8_0"
        convs = [e.messages for e in _episodes(4, 1, 2)]
        got, want = chat.generate(convs, 16), hf.generate(convs, 16)
        prefix = [_common_prefix_tokens(hf.tokenizer, a, b) for a, b in zip(got, want)]
        print(f"\nQ8_0 conversion vs float32 transformers, greedy: common prefix {prefix} tokens of 16")
        assert sum(p >= 4 for p in prefix) >= len(convs) // 2
    finally:
        chat.close()
    assert llamacpp.gguf_for(str(folder), tmp_path / "models", convert=True) == served  # found again by content
