"""A chat backend that calls an OpenAI-compatible server (vLLM, TGI, a hosted API) instead of running local weights.

It can stand in for `hf.ChatLM` (same `generate` signature, `name`, `batch_size`) wherever the agent, the human
simulator or the task generator is a served model. Requests go through one shared httpx client with an explicit
retry policy: timeouts, connection errors, 429 and 5xx are retried with capped exponential backoff and jitter (a
`Retry-After` is honoured); other 4xx are not. A request that still fails gives a `GenerationFailure` (an empty
string with a `.reason`) in its place, so a batch never raises and never loses an item silently. The API key comes
from an environment variable only and is sent nowhere but the Authorization header.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Callable
from urllib.parse import urlsplit

import httpx

from sweet.chat import GenerationFailure, prefill_of, whole_reply

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_WAIT_S = 60.0  # cap on any one wait between attempts, backoff or Retry-After
_SPEC = re.compile(r"^api:(?P<model>.+?)(?:@(?P<url>https?://.+))?$")


def is_api_spec(ref) -> bool:
    """True for `api:<model>` or `api:<model>@<base_url>`."""
    return isinstance(ref, str) and _SPEC.match(ref.strip()) is not None


def _safe_url(url: str) -> str:
    """scheme://host[:port]/path: no user info, query or fragment (any of which could carry a secret)."""
    u = urlsplit(url)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{u.scheme}://{host}{f':{u.port}' if u.port else ''}{u.path}"


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asks us to wait (`retry-after-ms`, or `Retry-After` as seconds or an HTTP date)."""
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class ChatAPI:
    """Chat completions from an OpenAI-compatible endpoint, many requests in flight at once."""

    def __init__(self, model: str, base_url: str, api_key: str | None = None, *, key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout_s: float = 60, max_retries: int = 4, backoff_s: float = 1.0,
                 name: str | None = None, batch_size: int | None = None, extra_body: dict | None = None,
                 max_n: int | None = None, recover: Callable[[], str | None] | None = None):
        """`extra_body`: fields added to every request (a server's own sampling options). `max_n`: the most
        completions one request may ask for (more are asked for in further requests). `recover`: called after a
        connection error (a local server that died); it returns the base URL to retry against once the server is
        back, or None; each request is retried at most once after a recovery."""
        if not model:
            raise ValueError("model is required")
        base_url = (base_url or "").strip().rstrip("/")
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got scheme {u.scheme!r}")
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise ValueError("need concurrency >= 1, max_retries >= 0, timeout_s > 0 and backoff_s >= 0")
        self.model, self.base_url, self.key_env = model, _safe_url(base_url), key_env
        self.concurrency, self.timeout_s = int(concurrency), float(timeout_s)
        self.max_retries, self.backoff_s = int(max_retries), float(backoff_s)
        if max_n is not None and max_n < 1:
            raise ValueError("max_n must be >= 1")
        self.extra_body, self.max_n, self.recover = dict(extra_body or {}), max_n, recover
        self.name = name or f"api:{model}"
        # Callers size their generate() calls by batch_size; a few requests per worker keeps the pool busy.
        self.batch_size = int(batch_size or 4 * self.concurrency)
        loopback = _is_loopback(base_url)
        key = api_key if api_key is not None else os.environ.get(key_env)
        if not key:
            if not loopback:
                raise RuntimeError(f"no API key: set the environment variable {key_env} "
                                   f"(required for the non-loopback endpoint {self.base_url})")
            key = "EMPTY"  # what vLLM and other local servers expect when they run without auth
        self._url = f"{base_url}/chat/completions"
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            follow_redirects=False, trust_env=not loopback)  # a loopback server is never reached through a proxy
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # set when a generate() call is interrupted: no retry, no recovery
        self.stats = {"requests": 0, "attempts": 0, "retries": 0, "failures": 0, "prompt_tokens": 0,
                      "completion_tokens": 0}

    @classmethod
    def from_spec(cls, spec: str, **settings) -> "ChatAPI":
        """`api:<model>` (base URL from the `base_url` setting, else $OPENAI_BASE_URL, else OpenAI) or
        `api:<model>@<base_url>`. Settings left as None take their defaults."""
        m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
        if m is None:
            raise ValueError(f"not an API model spec (expected 'api:<model>' or 'api:<model>@<base_url>'): {spec!r}")
        settings = {k: v for k, v in settings.items() if v is not None}
        base_url = settings.pop("base_url", None)
        base_url = m["url"] or base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        return cls(m["model"], base_url, **settings)

    def __repr__(self):
        return (f"ChatAPI(model={self.model!r}, base_url={self.base_url!r}, key_env={self.key_env!r}, "
                f"concurrency={self.concurrency})")

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def generate(self, conversations: list[list[dict]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, num_return_sequences: int = 1) -> list[str]:
        """One completion per conversation (or `num_return_sequences` consecutive ones per conversation), in input
        order; a `GenerationFailure` stands in for each completion whose request finally failed."""
        if not conversations:
            return []
        n = int(num_return_sequences)

        def one(i: int):
            # Each conversation its own seeds: the k episodes of a task open with the same prompt, and a server
            # that honours `seed` (vLLM) would otherwise return k identical samples.
            return self._complete(conversations[i], max_new_tokens, temperature, None if seed is None else seed + i * n, n)

        workers = min(self.concurrency, len(conversations))
        if workers == 1:
            groups = [one(i) for i in range(len(conversations))]
        else:
            pool = ThreadPoolExecutor(workers, thread_name_prefix="chatapi")
            try:
                groups = list(pool.map(one, range(len(conversations))))
            except BaseException:
                # Ctrl-C or `kill` (a KeyboardInterrupt here): drop the queued requests rather than serve them all
                # (`with` would wait for every one), and stop retrying the few in flight, so the caller unwinds and
                # stops its server at once.
                self._stopping.set()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
        return [s for group in groups for s in group]

    def _count(self, **deltas) -> None:
        with self._lock:
            for k, v in deltas.items():
                self.stats[k] += v

    def _complete(self, conversation, max_tokens, temperature, seed, n) -> list[str]:
        self._count(requests=1)
        out: list[str] = []
        try:
            while len(out) < n:  # some servers ignore `n`: ask again for what is missing
                want = n - len(out) if self.max_n is None else min(n - len(out), self.max_n)
                body = {**self.extra_body, "model": self.model, "messages": conversation,
                        "max_tokens": int(max_tokens), "temperature": float(temperature), "n": want}
                if prefill_of(conversation) is not None:  # continue the last message (vLLM's flags; llama-server
                    body.update(continue_final_message=True, add_generation_prompt=False)  # prefills it anyway)
                if seed is not None:
                    body["seed"] = int(seed) + len(out)
                got = self._post(body)
                if isinstance(got, GenerationFailure):
                    return out + [got] * (n - len(out))
                if not got:
                    return out + [self._fail("response had no choices", 1)] * (n - len(out))
                out.extend(whole_reply(conversation, t) for t in got[:n - len(out)])
            return out
        except Exception as e:  # never raise for one request; the type name carries no secret, a message might
            return out + [self._fail(f"client error ({type(e).__name__})", 1)] * (n - len(out))

    def _fail(self, what: str, attempts: int) -> GenerationFailure:
        reason = f"{what} after {attempts} attempt{'s' if attempts != 1 else ''}"
        self._count(failures=1)
        log.warning("%s: request failed: %s", self.name, reason)
        return GenerationFailure(reason)

    def _post(self, body: dict) -> list[str] | GenerationFailure:
        attempts, recovered = 0, False
        while True:
            attempts += 1
            self._count(attempts=1)
            wait = None
            try:
                r = self._http.post(self._url, json=body)
            except httpx.TimeoutException:
                what = "timeout"
            except httpx.UnsupportedProtocol:
                return self._fail("unsupported protocol", attempts)
            except httpx.TransportError as e:
                what = f"connection error ({type(e).__name__})"
                if self._stopping.is_set():
                    return self._fail(f"{what} while stopping", attempts)
                if self.recover is not None:  # a local server: bring it back, then retry this request once
                    if recovered:
                        return self._fail(f"{what} again after the server was recovered", attempts)
                    url = self.recover()
                    if url is None:
                        return self._fail(f"{what}, server not recovered", attempts)
                    recovered = True
                    with self._lock:
                        self._url = f"{url.rstrip('/')}/chat/completions"
                    self._count(retries=1)
                    log.info("%s: %s on attempt %d; server recovered, retrying", self.name, what, attempts)
                    continue
            else:
                if 200 <= r.status_code < 300:
                    return self._parse(r, attempts)
                what = f"HTTP {r.status_code}"
                if r.status_code != 429 and r.status_code < 500:
                    return self._fail(what, attempts)  # the request itself is wrong: retrying cannot help
                wait = _retry_after(r.headers)
            if attempts > self.max_retries or self._stopping.is_set():
                return self._fail(what, attempts)
            if wait is None:
                wait = self.backoff_s * 2 ** (attempts - 1) * random.uniform(0.5, 1.5)
            wait = min(wait, MAX_WAIT_S)
            self._count(retries=1)
            log.info("%s: %s on attempt %d of %d; retrying in %.2fs", self.name, what, attempts,
                     self.max_retries + 1, wait)
            time.sleep(wait)

    def _parse(self, r: httpx.Response, attempts: int) -> list[str] | GenerationFailure:
        try:
            data = r.json()
            choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
            texts = [(c["message"].get("content") or "").strip() for c in choices]
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._fail(f"malformed response (HTTP {r.status_code})", attempts)
        try:
            usage = data.get("usage") or {}
            self._count(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                        completion_tokens=int(usage.get("completion_tokens") or 0))
        except (AttributeError, TypeError, ValueError):
            pass  # usage is informational only
        return texts
