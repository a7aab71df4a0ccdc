"""A small, real OpenAI-compatible HTTP server for tests, on 127.0.0.1 and a free port.

    with OpenAIStub(responder=lambda req: "hi") as server:
        server.faults.extend([429, 500, "timeout", "reset"])   # one per chat request, then normal service
        ChatAPI("m", server.base_url).generate(...)
        server.requests[0]["json"], server.requests[0]["headers"]["authorization"], server.max_in_flight

Faults: an int is that HTTP status with an OpenAI-style error body; `(status, {"Retry-After": "1"})` adds headers;
"timeout" stalls for `timeout_sleep_s` before answering; "reset" drops the connection without a response.
`fault_for(request_json)` can target a fault at particular requests. `retry_after`, when set, is sent with every 429/503 fault. A responder may return a list of strings: one choice each
(fewer than `n` is allowed, to mimic servers that ignore `n`).
"""

from __future__ import annotations

import collections
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def echo(request: dict) -> str:
    """The default responder: deterministic text derived from the last message."""
    messages = request.get("messages") or [{}]
    return f"echo: {messages[-1].get('content', '')}"


class OpenAIStub:
    def __init__(self, responder=echo, *, model: str = "stub-model", delay_s: float = 0.0,
                 timeout_sleep_s: float = 5.0, retry_after: str | None = None, api_key: str | None = None):
        self.responder, self.model, self.delay_s = responder, model, delay_s
        self.timeout_sleep_s, self.retry_after = timeout_sleep_s, retry_after
        self.api_key = api_key  # when set, requests without `Bearer <api_key>` get 401
        self.faults: collections.deque = collections.deque()
        self.fault_for = None  # optional callable(request_json) -> fault or None, consulted before `faults`
        self.requests: list[dict] = []  # {"path", "json", "headers" (lower-case names), "time"} per chat request
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "OpenAIStub":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like a real server

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [
                        {"id": stub.model, "object": "model", "created": 0, "owned_by": "stub"}]})
                else:
                    self._json(404, _error("not found", "not_found"))

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._json(404, _error("not found", "not_found"))
                try:
                    body = json.loads(raw)
                except ValueError:
                    return self._json(400, _error("invalid JSON body", "invalid_request_error"))
                with stub._lock:
                    stub.requests.append({"path": self.path, "json": body, "time": time.monotonic(),
                                          "headers": {k.lower(): v for k, v in self.headers.items()}})
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    self._serve_chat(body)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _serve_chat(self, body):
                fault = stub.fault_for(body) if stub.fault_for else None
                if fault is None:
                    try:
                        fault = stub.faults.popleft()
                    except IndexError:
                        pass
                if fault == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                if fault == "timeout":
                    stub._stop.wait(stub.timeout_sleep_s)
                    self.close_connection = True
                    return self._json(200, _completion(stub, body, ["too late"]))
                if fault is not None:
                    status, headers = fault if isinstance(fault, tuple) else (fault, {})
                    if stub.retry_after is not None and status in (429, 503):
                        headers = {"Retry-After": stub.retry_after, **headers}
                    return self._json(status, _error(f"injected fault {status}", "stub_fault"), headers)
                if stub.api_key is not None and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                    return self._json(401, _error("invalid api key", "invalid_api_key"))
                if stub.delay_s:
                    stub._stop.wait(stub.delay_s)
                out = stub.responder(body)
                n = int(body.get("n") or 1)
                texts = list(out) if isinstance(out, (list, tuple)) else [out] * n
                self._json(200, _completion(stub, body, texts))

            def _json(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, str(v))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (e.g. after its timeout)
                    self.close_connection = True

        self._stop.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers stalled in a "timeout" fault or a delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> "OpenAIStub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


def _completion(stub: OpenAIStub, body: dict, texts: list[str]) -> dict:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
    return {
        "id": f"chatcmpl-stub-{len(stub.requests)}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", stub.model),
        "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                    for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(len(t.split()) for t in texts),
                  "total_tokens": prompt_tokens + sum(len(t.split()) for t in texts)},
    }
