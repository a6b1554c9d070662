"""No secret the builder holds is written in a record (trusted side).

A candidate runs with a scrubbed environment and without the usual credential files (`config.SANDBOX_HIDDEN_PATHS`),
so it cannot read the builder's keys where they usually live. A key kept anywhere else (a project's `.env`, a file
the hidden list does not name, the builder's own environment under process isolation, where /proc is the host's)
is readable, and an error that quotes it (a compiler quoting an included file, a traceback, a child's stderr)
would reach the published archive. So the store, `reverify` and `kernel-archive verify` redact every text of a
record they write of each secret value the builder knows: its environment variables named like credentials (`config.SECRET_ENV_NAMES`),
the Hub token, and the generator's API keys. That catches a key a candidate echoes; one it encodes on purpose only
the sandbox can keep from it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from builder import config
from schemas import KernelRecord, record_from_dict, record_to_dict

REDACTED = "[redacted]"
IDENTITY = ("task_id", "kernel_id")  # a record's key, which a rerun resumes by: never rewritten

log = logging.getLogger(__name__)


def known_secrets(environ: Mapping[str, str] | None = None, extra: Iterable[str | None] = ()) -> list[str]:
    """The secret values to redact, longest first (a key that contains another is replaced whole): the values of
    `environ`'s variables named like credentials, the Hub token, and `extra`; none shorter than
    `config.SECRET_MIN_CHARS`."""
    environ = os.environ if environ is None else environ
    values = [value for name, value in environ.items() if any(part in name.upper() for part in config.SECRET_ENV_NAMES)]
    values += [_hub_token(), *extra]
    kept = {value for value in values if value and len(value) >= config.SECRET_MIN_CHARS}
    return sorted(kept, key=len, reverse=True)


def _hub_token() -> str | None:
    """The Hub token the builder would publish with (HF_TOKEN, else the saved login); None without one."""
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception as exc:  # noqa: BLE001 - an unreadable token file is no token to redact, not a failed build
        log.debug("no Hub token read for redaction: %s", exc)
        return None


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret replaced by `REDACTED`, and so a part of one at either end of it (a bounded log
    excerpt may cut through a key) when that part is at least `config.SECRET_MIN_CHARS` long."""
    for secret in secrets:
        if not secret:
            continue
        text = text.replace(secret, REDACTED)
        for size in range(len(secret) - 1, config.SECRET_MIN_CHARS - 1, -1):
            if text.endswith(secret[:size]):
                text = text[:-size] + REDACTED
                break
        for size in range(len(secret) - 1, config.SECRET_MIN_CHARS - 1, -1):
            if text.startswith(secret[-size:]):
                text = REDACTED + text[size:]
                break
    return text


def redact_fields(fields: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    """A record's fields (or some of them) with every text redacted, but for its identity."""
    return {name: value if name in IDENTITY else redact_value(value, secrets) for name, value in fields.items()}


def redact_record(record: KernelRecord, secrets: list[str]) -> KernelRecord:
    """`record` with every text redacted, but for its identity (what reverify and the verify command print)."""
    return record_from_dict(redact_fields(record_to_dict(record), secrets)) if secrets else record


def redact_value(value: Any, secrets: list[str]) -> Any:
    """`value` with every string in it redacted (lists and mappings walked, other values as they are)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list | tuple):
        return type(value)(redact_value(item, secrets) for item in value)
    if isinstance(value, dict):
        return {key: redact_value(item, secrets) for key, item in value.items()}
    return value
