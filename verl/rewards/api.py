"""`api`: score batches with a remote HTTP reward service.

Request  (POST cfg.url, Content-Type: application/json, one per chunk of rm_batch_size samples):
    {"prompts": [str, ...], "responses": [str, ...], "samples": [{...sample dict...}, ...]}
Response (HTTP 200):
    {"scores": [float, ...]}          one number per sample, same order

Chunks go out `concurrency` at a time (threads). Each request has a `timeout_s` limit
(default 30 s; urllib applies it to each socket operation); timeouts, dropped connections,
HTTP 429 and 5xx are retried up to `max_retries` times with exponential backoff
(BACKOFF_S * 2**attempt). Other 4xx and malformed bodies are not retried. The whole call
is bounded too (`worst_case_s`): rounds of `concurrency` requests, each at most
(max_retries + 1) attempts of 2 x timeout_s (connecting, then the reply) plus the backoff
waits; a server that trickles its reply slowly enough to keep resetting the socket timeout
is cut off there (verl.rewards.deadline). With `api_key_env` set, the key is read from that
environment variable (an error if unset), sent as `Authorization: Bearer <key>` and
registered with verl.redact: a server that echoes it in an error body has it replaced by
"***" in every message, warning and log. Credentials in the URL (`http://user:KEY@host/score`)
are taken out of it and sent as `Authorization: Basic` (unless `api_key_env` gives a key), and
the password is registered with verl.redact the same way. A chunk that still fails raises `RewardError`
(on_error: fail) or scores its samples 0 and counts them in reward/errors (on_error: zero).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import http.client
import json
import logging
import math
import os
import queue
import socket
import threading
import time
import urllib.error
import urllib.request

from verl.errors import ConfigError
from verl.redact import redact, register_secret, url_password
from verl.rewards.base import RewardError, RewardFn, SampleError, short
from verl.rewards.deadline import CallBudget, request_timeout_s

logger = logging.getLogger("verl.rewards")
BACKOFF_S = 0.5  # first retry waits this long, then doubles
ERROR_BODY_CHARS = 200  # how much of an error response's body a message shows (after redaction)


def request_worst_case_s(cfg: RewardFnConfig) -> float:
    """The longest one request (with its retries) can take: (max_retries + 1) attempts of
    2 x timeout_s (connecting, then waiting for the reply) plus the backoff waits between them."""
    backoff = sum(BACKOFF_S * 2 ** attempt for attempt in range(cfg.max_retries))
    return (cfg.max_retries + 1) * 2 * request_timeout_s(cfg) + backoff


def worst_case_s(cfg: RewardFnConfig, n: int) -> float:
    """The longest one call on `n` samples can take: its requests go out `concurrency` at a time."""
    chunks = max(1, math.ceil(n / max(1, cfg.rm_batch_size)))
    return math.ceil(chunks / max(1, cfg.concurrency)) * request_worst_case_s(cfg)


def _body_text(raw: bytes) -> str:
    """A response body as one redacted line (redacted before shortening, so no part of a secret shows)."""
    return short(redact(raw.decode("utf-8", "replace")), ERROR_BODY_CHARS)


class _Retryable(Exception):
    pass


def _without_userinfo(url: str) -> tuple[str, str]:
    """(the URL without `user:password@`, base64 of "user:password" for HTTP Basic, or "");
    urllib would otherwise take the userinfo for part of the host name."""
    import base64
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, ""
    host = parts.netloc.rpartition("@")[2]
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    register_secret(token)
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), token


class APIReward:
    isolate_errors = False  # failures are handled per chunk here

    def __init__(self, cfg: RewardFnConfig):
        self.cfg = cfg
        register_secret(url_password(cfg.url))  # a password in the URL: hidden wherever it appears
        self.__name__ = redact(f"api({cfg.url})")
        self._url, basic = _without_userinfo(cfg.url)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if basic:
            self._headers["Authorization"] = f"Basic {basic}"
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise ConfigError(f"reward_fn.api_key_env: environment variable '{cfg.api_key_env}' is not set "
                                  f"(it must hold the API key for {cfg.url})")
            register_secret(key)
            self._headers["Authorization"] = f"Bearer {key}"

    def _post_once(self, body: bytes, n: int) -> list:
        request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=request_timeout_s(self.cfg)) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read(4 * ERROR_BODY_CHARS)
            except (OSError, http.client.HTTPException):
                body = b""
            why = redact(f"HTTP {exc.code} {exc.reason}") + (f": {_body_text(body)}" if body.strip() else "")
            if exc.code == 429 or exc.code >= 500:
                raise _Retryable(why) from None
            raise RuntimeError(why) from None
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, TimeoutError,
                ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Retryable(redact(f"{type(reason).__name__}: {reason}")) from None
        try:
            scores = json.loads(raw)["scores"]
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"malformed response (want {{\"scores\": [...]}}): {_body_text(raw)}") from None
        if not isinstance(scores, list) or len(scores) != n:
            raise RuntimeError(f"response has {len(scores) if isinstance(scores, list) else 'no'} scores "
                               f"for {n} samples")
        return scores

    def _post(self, prompts, responses, samples) -> list:
        body = json.dumps({"prompts": prompts, "responses": responses, "samples": samples}, default=str).encode()
        attempt = 0
        while True:
            try:
                return self._post_once(body, len(responses))
            except _Retryable as exc:
                if attempt >= self.cfg.max_retries:
                    raise RuntimeError(f"{exc} (after {attempt + 1} attempts)") from None
                wait = BACKOFF_S * 2 ** attempt
                logger.warning("reward api %s: %s; retry %d/%d in %.1fs", self.cfg.url, exc, attempt + 1,
                               self.cfg.max_retries, wait)
                time.sleep(wait)
                attempt += 1

    def _chunk(self, start, prompts, responses, samples) -> list:
        try:
            return self._post(prompts, responses, samples)
        except Exception as exc:
            message = redact(f"reward api ({self.cfg.url}) failed on samples {start}-{start + len(responses) - 1} "
                             f"(first: prompt={short(prompts[0])!r}, response={short(responses[0])!r}): {exc}")
            if self.cfg.on_error == "fail":
                raise RewardError(message + " [set on_error: zero to score such samples 0]") from None
            return [SampleError(redact(str(exc)))] * len(responses)

    def __call__(self, prompts, responses, samples) -> list:
        """Every chunk's scores, within worst_case_s (the manager gives this type no limit of its own)."""
        limit = "the api reward's worst case (reward_fn.timeout_s, max_retries, concurrency: see verl.rewards.api)"
        return CallBudget(worst_case_s(self.cfg, len(responses)), self.__name__, limit).call(
            self._score_chunks, prompts, responses, samples)

    def _score_chunks(self, prompts, responses, samples) -> list:
        """The chunks, `concurrency` at a time. Daemon threads rather than a ThreadPoolExecutor: the
        interpreter joins an executor's threads at exit, so a request abandoned at worst_case_s (a
        trickling server) would hold the process's exit up."""
        size = max(1, self.cfg.rm_batch_size)
        starts = list(range(0, len(responses), size))
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(len(starts)):
            todo.put(i)
        results: list = [None] * len(starts)  # (scores, None) or (None, exception), per chunk

        def work():
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                s = starts[i]
                try:
                    results[i] = (self._chunk(s, prompts[s:s + size], responses[s:s + size], samples[s:s + size]),
                                  None)
                except BaseException as exc:  # noqa: BLE001 - raised below, in chunk order
                    results[i] = (None, exc)

        workers = [threading.Thread(target=work, name="verl-reward-api", daemon=True)
                   for _ in range(max(1, min(self.cfg.concurrency, len(starts))))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for _, error in results:
            if error is not None:
                raise error
        return [x for chunk, _ in results for x in chunk]


def build_api(cfg: RewardFnConfig) -> RewardFn:
    # The section checked url (http/https), timeout_s, concurrency and max_retries (verl/config/reward_fn.py).
    return APIReward(cfg)
