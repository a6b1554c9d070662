"""How a candidate's failure is told in a child's result (untrusted child side)."""

from __future__ import annotations

MESSAGE_CHARS = 2000  # one exception message kept in a result (the parent bounds the whole error again)


class CandidateFailure(Exception):
    """The candidate raised (or a CUDA error surfaced right after it ran)."""


def exception_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 6] + " [...]"
