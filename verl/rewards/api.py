"""`api`: score batches with a remote HTTP reward service.

Request  (POST cfg.url, Content-Type: application/json, one per chunk of rm_batch_size samples):
    {"prompts": [str, ...], "responses": [str, ...], "samples": [{...sample dict...}, ...]}
Response (HTTP 200):
    {"scores": [float, ...]}          one number per sample, same order

Chunks go out `concurrency` at a time (threads). Each request has a `timeout_s` limit;
timeouts, dropped connections, HTTP 429 and 5xx are retried up to `max_retries` times
with exponential backoff (BACKOFF_S * 2**attempt). Other 4xx and malformed bodies are
not retried. With `api_key_env` set, the key is read from that environment variable
(an error if unset) and sent as `Authorization: Bearer <key>`; it never appears in
errors or logs. A chunk that still fails raises `RewardError` (on_error: fail) or
scores its samples 0 and counts them in reward/errors (on_error: zero).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from verl.config import ConfigError, RewardFnConfig
from verl.rewards.base import RewardError, RewardFn, SampleError, short

logger = logging.getLogger("verl.rewards")
BACKOFF_S = 0.5  # first retry waits this long, then doubles


class _Retryable(Exception):
    pass


class APIReward:
    isolate_errors = False  # failures are handled per chunk here

    def __init__(self, cfg: RewardFnConfig):
        self.cfg = cfg
        self.__name__ = f"api({cfg.url})"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise ConfigError(f"reward_fn.api_key_env: environment variable '{cfg.api_key_env}' is not set "
                                  f"(it must hold the API key for {cfg.url})")
            self._headers["Authorization"] = f"Bearer {key}"

    def _post_once(self, body: bytes, n: int) -> list:
        request = urllib.request.Request(self.cfg.url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code} {exc.reason}"
            if exc.code == 429 or exc.code >= 500:
                raise _Retryable(why) from None
            raise RuntimeError(why) from None
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, TimeoutError,
                ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Retryable(f"{type(reason).__name__}: {reason}") from None
        try:
            scores = json.loads(raw)["scores"]
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"malformed response (want {{\"scores\": [...]}}): {short(raw, 80)}") from None
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
            message = (f"reward api ({self.cfg.url}) failed on samples {start}-{start + len(responses) - 1} "
                       f"(first: prompt={short(prompts[0])!r}, response={short(responses[0])!r}): {exc}")
            if self.cfg.on_error == "fail":
                raise RewardError(message + " [set on_error: zero to score such samples 0]") from None
            return [SampleError(str(exc))] * len(responses)

    def __call__(self, prompts, responses, samples) -> list:
        size = max(1, self.cfg.rm_batch_size)
        starts = list(range(0, len(responses), size))
        with ThreadPoolExecutor(max_workers=max(1, min(self.cfg.concurrency, len(starts) or 1))) as pool:
            futures = [pool.submit(self._chunk, s, prompts[s:s + size], responses[s:s + size], samples[s:s + size])
                       for s in starts]
            results = [f.result() for f in futures]
        return [x for chunk in results for x in chunk]


def build_api(cfg: RewardFnConfig) -> RewardFn:
    if not cfg.url:
        raise ConfigError("reward_fn.url: required for type api")
    if not cfg.url.startswith(("http://", "https://")):
        raise ConfigError(f"reward_fn.url: '{cfg.url}' must start with http:// or https://")
    for key in ("timeout_s", "concurrency"):
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"reward_fn.{key}: must be > 0, got {getattr(cfg, key)}")
    if cfg.max_retries < 0:
        raise ConfigError(f"reward_fn.max_retries: must be >= 0, got {cfg.max_retries}")
    return APIReward(cfg)
