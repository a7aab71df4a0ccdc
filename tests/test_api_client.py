"""`sweet.agents.api.ChatAPI` against a real OpenAI-compatible HTTP server on 127.0.0.1 (tests/openai_stub.py)."""

import logging
import pickle
import random
import time

import pytest

from sweet.agents import api
from sweet.agents.api import ChatAPI, GenerationFailure, is_api_spec

FAKE_KEY = "sk-test-DO-NOT-LEAK-7f3a9c1e5b"


def conv(text: str) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def client(server, **kw) -> ChatAPI:
    kw = {"concurrency": 4, "timeout_s": 5, "max_retries": 3, "backoff_s": 0.01, **kw}
    return ChatAPI("stub-model", server.base_url, **kw)


def test_results_in_input_order_and_stripped(openai_server):
    def slow_echo(req):
        time.sleep(random.uniform(0, 0.05))  # finish out of order
        return f"  \n reply to {req['messages'][-1]['content']}  \n"
    openai_server.responder = slow_echo
    with client(openai_server, concurrency=5) as lm:
        out = lm.generate([conv(f"q{i}") for i in range(12)], max_new_tokens=16)
    assert out == [f"reply to q{i}" for i in range(12)]
    assert not any(isinstance(s, GenerationFailure) for s in out)
    assert lm.stats["requests"] == lm.stats["attempts"] == 12 and lm.stats["failures"] == 0
    assert lm.stats["completion_tokens"] > 0


def test_empty_batch_sends_nothing(openai_server):
    with client(openai_server) as lm:
        assert lm.generate([], max_new_tokens=8) == []
    assert openai_server.requests == []


def test_concurrency_bound_is_respected(openai_server):
    openai_server.delay_s = 0.15
    with client(openai_server, concurrency=3) as lm:
        out = lm.generate([conv(f"q{i}") for i in range(9)], max_new_tokens=8)
    assert len(out) == 9 and all(out)
    assert openai_server.max_in_flight == 3  # parallel, but never more than the bound


def test_num_return_sequences_uses_n_and_groups_consecutively(openai_server):
    openai_server.responder = lambda req: [f"{req['messages'][-1]['content']} #{i}" for i in range(req["n"])]
    with client(openai_server) as lm:
        out = lm.generate([conv("a"), conv("b")], max_new_tokens=8, temperature=0.7, num_return_sequences=3)
    assert out == ["a #0", "a #1", "a #2", "b #0", "b #1", "b #2"]
    assert [r["json"]["n"] for r in openai_server.requests] == [3, 3]


def test_server_that_ignores_n_is_asked_again(openai_server):
    openai_server.responder = lambda req: [f"sample seed={req.get('seed')}"]  # one choice whatever n says
    with client(openai_server, concurrency=1) as lm:
        out = lm.generate([conv("a")], max_new_tokens=8, temperature=1.0, seed=10, num_return_sequences=3)
    assert out == ["sample seed=10", "sample seed=11", "sample seed=12"]
    assert [r["json"]["n"] for r in openai_server.requests] == [3, 2, 1]
    with client(openai_server, concurrency=1) as lm:
        # Two identical conversations (a task's k episodes on turn 1) get different seeds.
        assert lm.generate([conv("a"), conv("a")], 8, 1.0, seed=10, num_return_sequences=2) == \
            ["sample seed=10", "sample seed=11", "sample seed=12", "sample seed=13"]


def test_sampling_parameters_are_sent(openai_server):
    with client(openai_server) as lm:
        lm.generate([conv("x")], max_new_tokens=77, temperature=0.5, seed=123)
        lm.generate([conv("y")], max_new_tokens=5)
    first, second = (r["json"] for r in openai_server.requests)
    assert first == {"model": "stub-model", "messages": conv("x"), "max_tokens": 77, "temperature": 0.5, "n": 1,
                     "seed": 123}
    assert second["temperature"] == 0.0 and second["max_tokens"] == 5 and "seed" not in second
    assert openai_server.requests[0]["path"] == "/v1/chat/completions"


def test_retries_on_429_5xx_timeout_and_reset_then_succeeds(openai_server):
    openai_server.timeout_sleep_s = 2.0
    openai_server.faults.extend([429, 500, 502, 503, "timeout", "reset"])
    with client(openai_server, timeout_s=0.5, max_retries=6) as lm:
        out = lm.generate([conv("hello")], max_new_tokens=8)
    assert out == ["echo: hello"]
    assert len(openai_server.requests) == 7
    assert lm.stats["attempts"] == 7 and lm.stats["retries"] == 6 and lm.stats["failures"] == 0


def test_final_failure_is_a_generation_failure_and_the_rest_succeed(openai_server):
    openai_server.fault_for = lambda req: 503 if req["messages"][-1]["content"] == "doomed" else None
    with client(openai_server, concurrency=4, max_retries=2) as lm:
        out = lm.generate([conv("a"), conv("doomed"), conv("c"), conv("d")], max_new_tokens=8,
                          num_return_sequences=2)
    assert out[:2] == ["echo: a"] * 2 and out[4:] == ["echo: c", "echo: c", "echo: d", "echo: d"]
    for failed in out[2:4]:
        assert isinstance(failed, GenerationFailure) and failed == "" and failed.strip() == ""
        assert failed.reason == "HTTP 503 after 3 attempts"
    assert sum(r["json"]["messages"][-1]["content"] == "doomed" for r in openai_server.requests) == 3
    assert lm.stats["failures"] == 1 and lm.stats["retries"] == 2


def test_timeout_failure_reason(openai_server):
    openai_server.timeout_sleep_s = 1.0
    openai_server.faults.extend(["timeout", "timeout"])
    with client(openai_server, timeout_s=0.2, max_retries=1) as lm:
        [out] = lm.generate([conv("slow")], max_new_tokens=8)
    assert isinstance(out, GenerationFailure) and out.reason == "timeout after 2 attempts"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_4xx_are_not_retried(openai_server, status):
    openai_server.faults.append(status)
    with client(openai_server) as lm:
        [out] = lm.generate([conv("bad")], max_new_tokens=8)
    assert isinstance(out, GenerationFailure) and out.reason == f"HTTP {status} after 1 attempt"
    assert len(openai_server.requests) == 1 and lm.stats["retries"] == 0


def test_retry_after_is_honoured(openai_server):
    openai_server.faults.extend([(429, {"Retry-After": "1"}), (503, {"retry-after-ms": "300"})])
    with client(openai_server, backoff_s=0.0) as lm:
        assert lm.generate([conv("x")], max_new_tokens=8) == ["echo: x"]
    t = [r["time"] for r in openai_server.requests]
    assert t[1] - t[0] >= 0.95 and 0.28 <= t[2] - t[1] < 0.95


def test_retry_after_is_capped(openai_server, monkeypatch):
    monkeypatch.setattr(api, "MAX_WAIT_S", 0.1)
    openai_server.retry_after = "3600"
    openai_server.faults.append(429)
    start = time.monotonic()
    with client(openai_server) as lm:
        assert lm.generate([conv("x")], max_new_tokens=8) == ["echo: x"]
    assert time.monotonic() - start < 2


def test_key_comes_from_the_named_env_var_and_goes_in_the_header(openai_server, monkeypatch):
    monkeypatch.setenv("SWEET_TEST_KEY", FAKE_KEY)
    openai_server.api_key = FAKE_KEY
    with client(openai_server, key_env="SWEET_TEST_KEY") as lm:
        assert lm.generate([conv("x")], max_new_tokens=8) == ["echo: x"]
    assert openai_server.requests[0]["headers"]["authorization"] == f"Bearer {FAKE_KEY}"


def test_wrong_key_is_a_401_failure_not_retried(openai_server, monkeypatch):
    monkeypatch.setenv("SWEET_TEST_KEY", "sk-wrong")
    openai_server.api_key = FAKE_KEY
    with client(openai_server, key_env="SWEET_TEST_KEY") as lm:
        [out] = lm.generate([conv("x")], max_new_tokens=8)
    assert out.reason == "HTTP 401 after 1 attempt" and len(openai_server.requests) == 1


def test_missing_key_is_fine_on_loopback(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with client(openai_server) as lm:
        lm.generate([conv("x")], max_new_tokens=8)
    assert openai_server.requests[0]["headers"]["authorization"] == "Bearer EMPTY"
    for url in ("http://localhost:8000/v1", "http://[::1]:8000/v1", "http://127.0.0.2:9/v1"):
        ChatAPI("m", url).close()


def test_missing_key_for_a_remote_url_names_the_variable(monkeypatch):
    monkeypatch.delenv("SWEET_MISSING_KEY", raising=False)
    with pytest.raises(RuntimeError, match="SWEET_MISSING_KEY"):
        ChatAPI("gpt-4o", "https://api.example.com/v1", key_env="SWEET_MISSING_KEY")
    monkeypatch.setenv("SWEET_MISSING_KEY", "")
    with pytest.raises(RuntimeError, match="SWEET_MISSING_KEY"):
        ChatAPI("gpt-4o", "https://api.example.com/v1", key_env="SWEET_MISSING_KEY")


def test_key_never_appears_in_repr_logs_errors_or_stats(openai_server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    monkeypatch.setenv("SWEET_TEST_KEY", FAKE_KEY)
    openai_server.timeout_sleep_s = 1.0
    openai_server.fault_for = lambda req: {"reject": 401, "bad": 400}.get(req["messages"][-1]["content"])
    openai_server.faults.extend([429, 500, "timeout", "reset"])
    with client(openai_server, key_env="SWEET_TEST_KEY", concurrency=1, timeout_s=0.5, max_retries=4) as lm:
        out = lm.generate([conv("a"), conv("bad"), conv("reject")], max_new_tokens=8)
        assert out[0] == "echo: a"
        reasons = [s.reason for s in out if isinstance(s, GenerationFailure)]
        assert len(reasons) == 2 and lm.stats["retries"] >= 3
        seen = [repr(lm), str(lm), str(lm.stats), *reasons, *map(repr, out), caplog.text]
    with pytest.raises(ValueError) as bad:
        ChatAPI("m", "ftp://127.0.0.1/v1", api_key=FAKE_KEY)
    seen.append(str(bad.value))
    assert caplog.records, "the retries should have been logged"
    assert "429" in caplog.text and "500" in caplog.text
    assert not any(FAKE_KEY in s or FAKE_KEY[-10:] in s for s in seen)


def test_from_spec(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with ChatAPI.from_spec("api:gpt-4o") as lm:
        assert (lm.model, lm.base_url, lm.name) == ("gpt-4o", api.DEFAULT_BASE_URL, "api:gpt-4o")
    with ChatAPI.from_spec("api:gpt-4o", base_url="http://127.0.0.1:9/v1/", concurrency=2, timeout_s=None) as lm:
        assert (lm.base_url, lm.concurrency, lm.timeout_s) == ("http://127.0.0.1:9/v1", 2, 60)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:7/v1")
    with ChatAPI.from_spec("api:gpt-4o") as lm:
        assert lm.base_url == "http://localhost:7/v1"
    spec = "api:meta-llama/Llama-3.1-70B-Instruct@http://127.0.0.1:8000/v1"
    with ChatAPI.from_spec(spec, base_url="http://ignored:1/v1", name="sim") as lm:
        assert (lm.model, lm.base_url, lm.name) == ("meta-llama/Llama-3.1-70B-Instruct", "http://127.0.0.1:8000/v1",
                                                    "sim")
    with ChatAPI.from_spec("api:claude-3-5-sonnet@20240620@https://example.com/v1") as lm:
        assert (lm.model, lm.base_url) == ("claude-3-5-sonnet@20240620", "https://example.com/v1")
    with ChatAPI.from_spec(f"api:stub-model@{openai_server.base_url}", concurrency=2) as lm:
        assert lm.generate([conv("hi")], max_new_tokens=4) == ["echo: hi"]
        assert lm.batch_size >= lm.concurrency
    for bad in ("gpt-4o", "api:", "Qwen/Qwen2.5-0.5B-Instruct"):
        with pytest.raises(ValueError):
            ChatAPI.from_spec(bad)


def test_is_api_spec():
    assert is_api_spec("api:gpt-4o") and is_api_spec("api:org/model@http://127.0.0.1:8000/v1")
    assert not any(is_api_spec(r) for r in ("", "api:", "Qwen/Qwen2.5-0.5B-Instruct", "artifacts/models/x", None))


def test_generation_failure_is_an_empty_string_that_pickles():
    f = GenerationFailure("HTTP 500 after 5 attempts")
    assert isinstance(f, str) and f == "" and not f and f.reason == "HTTP 500 after 5 attempts"
    g = pickle.loads(pickle.dumps(f))
    assert isinstance(g, GenerationFailure) and g.reason == f.reason and g == ""


def test_stub_speaks_the_openai_protocol(openai_server):
    """The official SDK accepts the stub's responses, so the stub is a fair stand-in for a real server."""
    openai = pytest.importorskip("openai")
    sdk = openai.OpenAI(base_url=openai_server.base_url, api_key="EMPTY", max_retries=0)
    r = sdk.chat.completions.create(model="stub-model", messages=conv("ping"), n=2, max_tokens=4)
    assert [c.message.content for c in r.choices] == ["echo: ping"] * 2 and r.usage.total_tokens > 0
    assert [m.id for m in sdk.models.list()] == ["stub-model"]
