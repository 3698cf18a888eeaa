"""Secret values this process knows, and `redact(text)`, which hides them.

API keys never live in the config: `reward_fn.api_key_env` names the environment variable that
holds one. When a reward that sends such a key is built (`verl.rewards.api`), it registers the
value here, and what verl prints or logs passes through `redact`:

  * messages built from a server's response (verl.rewards.api), before they go into an
    exception, a warning or a log line;
  * the CLI's one-line errors (verl/cli.py);
  * every tracker backend: console lines, metrics/samples/text jsonl, TensorBoard, WandB
    (verl/tracking/backends.py);
  * every `logging` record of the process (a record factory: third-party loggers too) and every
    `warnings` message (`warnings.formatwarning`), installed when the first secret is registered.

A registered value is replaced by "***" wherever it appears, also in the escaped forms a server
may echo it in (JSON string escapes, URL quoting). Secrets are only added, never removed: a key
used once in a process stays hidden for the rest of it.

Credentials in a URL's userinfo are hidden whether registered or not, in everything `redact`
and `redact_obj` see (console, logs, config.yaml, run_info.json, checkpoints):
`http://user:KEY@host/score` -> `http://user:***@host/score`, `https://TOKEN@host` ->
`https://***@host`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
import warnings
from typing import Any, Optional

MASK = "***"

_SECRETS: set[str] = set()
_PATTERN: Optional[re.Pattern] = None  # one alternation of every form, longest first
_LOCK = threading.Lock()
_HOOKED = False
# scheme://userinfo@ : group 1 the user where a password follows, group 2 what is hidden
_URL_USERINFO = re.compile(r"(?<=://)(?:([^\s/?#@:]*):)?([^\s/?#@]+)@")


def _hide_userinfo(match: re.Match) -> str:
    return f"{match.group(1)}:{MASK}@" if match.group(1) is not None else f"{MASK}@"


def url_password(url: str) -> Optional[str]:
    """The password (or token) of a URL's userinfo, None when it has none."""
    try:
        parts = urllib.parse.urlsplit(str(url))
    except ValueError:
        return None
    return parts.password or (parts.username if parts.username and "@" in parts.netloc else None)


def _forms(value: str) -> set[str]:
    """The value and the escaped spellings it takes inside JSON bodies and URLs."""
    return {f for f in (value, json.dumps(value)[1:-1], urllib.parse.quote(value, safe=""),
                        urllib.parse.quote_plus(value)) if f}


def register_secret(value: Optional[str]) -> None:
    """Hide `value` (an API key, a bearer token) from everything verl prints or logs from now on."""
    global _PATTERN
    if not value:
        return
    with _LOCK:
        new = _forms(str(value)) - _SECRETS
        if not new:
            return
        _SECRETS.update(new)
        _PATTERN = re.compile("|".join(re.escape(s) for s in sorted(_SECRETS, key=len, reverse=True)))
    _install_hooks()


def has_secrets() -> bool:
    return bool(_SECRETS)


def redact(text: Any) -> Any:
    """`text` with every registered secret and every URL password replaced by "***"
    (non-strings are returned as they are)."""
    if not isinstance(text, str):
        return text
    if "://" in text:
        text = _URL_USERINFO.sub(_hide_userinfo, text)
    pattern = _PATTERN
    return text if pattern is None else pattern.sub(MASK, text)


def redact_obj(obj: Any) -> Any:
    """`redact` applied to every string inside dicts, lists and tuples (keys included)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_obj(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj


# ---------------------------------------------------------------------------
# Process-wide hooks: logging records and warnings
# ---------------------------------------------------------------------------


def _install_hooks() -> None:
    global _HOOKED
    with _LOCK:
        if _HOOKED:
            return
        _HOOKED = True
    previous_factory = logging.getLogRecordFactory()

    def record_factory(*args, **kwargs):
        record = previous_factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed format string: logging reports it itself
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    logging.setLogRecordFactory(record_factory)
    previous_format = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        return redact(previous_format(message, category, filename, lineno, line))

    warnings.formatwarning = formatwarning
