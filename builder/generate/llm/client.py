"""One chat completion against an OpenAI-compatible endpoint, with retries, usage and cost.

Transient failures (429, 5xx, timeouts, dropped connections) are retried with exponential backoff and
jitter (tenacity); the SDK's own retries are switched off so there is one policy. Anything else, or a
transient failure that outlasts the retries, comes back as a `Completion` with `error` set: the loop
records it as a failed attempt instead of crashing the build. Authentication and unknown-model errors
stop the run (UsageError): every further request would fail the same way.

Every error text passes through `redact`, so an API key never reaches a record, a log or an exception.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import openai
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from builder import config
from builder.errors import UsageError
from builder.generate.llm.settings import ModelSpec
from builder.redaction import redact

log = logging.getLogger(__name__)

TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)
FATAL = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


@dataclass
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    error: str | None = None  # set when no response came back
    finish_reason: str | None = None


class ChatClient:
    """A client bound to one model spec; thread-safe (the SDK client is)."""

    def __init__(
        self,
        spec: ModelSpec,
        default_max_tokens: int = config.LLM_MAX_TOKENS,
        attempts: int = config.LLM_RETRY_ATTEMPTS,
        initial_wait_s: float = config.LLM_RETRY_INITIAL_S,
        max_wait_s: float = config.LLM_RETRY_MAX_S,
        timeout_s: float = config.LLM_REQUEST_TIMEOUT_S,
    ) -> None:
        self.spec = spec
        self.max_tokens = spec.max_tokens or default_max_tokens
        self._secrets = [spec.api_key] if spec.api_key else []
        self._attempts = attempts
        self._initial_wait_s = initial_wait_s
        self._max_wait_s = max_wait_s
        # Local servers (vLLM, Ollama) accept any key; the SDK insists on one, so a placeholder stands in.
        self._client = openai.OpenAI(
            base_url=spec.base_url,
            api_key=spec.api_key or "no-key",
            max_retries=0,
            timeout=timeout_s,
        )

    def _create(self, messages: list[dict[str, str]]):
        return self._client.chat.completions.create(
            model=self.spec.name,
            messages=messages,
            temperature=self.spec.temperature,
            top_p=self.spec.top_p,
            max_tokens=self.max_tokens,
        )

    def complete(self, messages: list[dict[str, str]]) -> Completion:
        retrying = Retrying(
            retry=retry_if_exception_type(TRANSIENT),
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=self._initial_wait_s, max=self._max_wait_s)
            + wait_random(0, self._initial_wait_s),
            before_sleep=lambda state: log.warning(
                "%s: transient error, retry %d: %s",
                self.spec.name,
                state.attempt_number,
                redact(str(state.outcome.exception()), self._secrets) if state.outcome else "",
            ),
            reraise=True,
        )
        try:
            response = retrying(self._create, messages)
        except FATAL as exc:
            raise UsageError(
                f"model {self.spec.name}: {type(exc).__name__}: {redact(_short(exc), self._secrets)}"
            ) from None
        except openai.OpenAIError as exc:
            return Completion(text="", error=redact(f"{type(exc).__name__}: {_short(exc)}", self._secrets))
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(response, "choices", None) or []
        text = (choices[0].message.content or "") if choices and choices[0].message else ""
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self.spec.cost(prompt_tokens, completion_tokens),
            finish_reason=choices[0].finish_reason if choices else None,
            error=None if choices else "response held no choices",
        )


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][: config.ERROR_TEXT_BYTES] if str(exc) else type(exc).__name__
