"""The evaluator's data: what goes in (``EvalItem``: a prompt, its candidate set, an optional ranked anchor list;
``Check``: one (prompt, response, criterion) question) and what comes out (``GeneratedRubric``, ``ScoredRubric``,
``SetEvaluation``), with the cost of each stage (``StageStats``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

from dr_core.engines.base import Completion
from dr_core.rubric.schema import Rubric

Mode = Literal["dynamic", "static"]
#: How a generator is asked for a rubric: the structured-output JSON prompt, or the primed 'lines' prompt it is
#: trained with (dr_core/evaluator/generate.py).
RubricFormat = Literal["json", "lines"]


@dataclass(frozen=True)
class RubricSampling:
    """How the generator is asked for each rubric (``generate_rubrics``): mode, sampling temperature, the longest
    rubric in tokens, whether the JSON prompt's output is constrained to the schema, and the format."""

    mode: Mode = "dynamic"
    temperature: float = 0.7
    max_tokens: int = 512
    structured: bool = True
    rubric_format: RubricFormat = "json"

    def __post_init__(self):
        if self.mode not in ("dynamic", "static"):
            raise ValueError(f"mode must be 'dynamic' or 'static', got {self.mode!r}")
        if self.rubric_format not in ("json", "lines") or (self.rubric_format == "lines" and self.mode != "dynamic"):
            raise ValueError(f"rubric_format must be 'json' or (in dynamic mode) 'lines', got {self.rubric_format!r}")


#: The generator's defaults (frozen, so one shared value).
DEFAULT_SAMPLING = RubricSampling()


#: finish reasons of a complete generation (vLLM says "stop" for EOS and stop strings)
DONE_REASONS = {"stop"}


@dataclass(frozen=True)
class EvalItem:
    """One set to evaluate: the conditioning candidates C the generator sees (and that are scored), plus an
    optional ranked anchor list (best first) that the same rubric is applied to but the generator never sees."""

    prompt: str
    candidates: tuple[str, ...]
    anchors: tuple[str, ...] | None = None


@dataclass
class StageStats:
    """Cost of one stage: conversations sent, tokens, prefix-cache hits (when the engine reports them), seconds."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0
    #: per endpoint URL of an engine with several (dr_core/evaluator/endpoints.py): what the stage's calls did there
    endpoints: dict = field(default_factory=dict)

    def add(self, completions: Sequence[Completion], seconds: float) -> None:
        self.requests += len(completions)
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.completion_tokens += sum(sum(c.completion_tokens) for c in completions)
        self.cached_tokens += sum(c.cached_tokens or 0 for c in completions)
        self.seconds += seconds

    def add_endpoints(self, delta: dict[str, dict]) -> None:
        """Add one call's endpoint counts (``endpoints.endpoint_delta``; ``down`` is the later state)."""
        for url, counts in delta.items():
            mine = self.endpoints.setdefault(url, {})
            for k, v in counts.items():
                mine[k] = v if isinstance(v, bool) else mine.get(k, 0) + v

    def merge(self, other: "StageStats") -> None:
        """Add another stage's cost to this one (several engine calls of one stage), endpoint counts included."""
        for k, v in asdict(other).items():
            if k != "endpoints":
                setattr(self, k, getattr(self, k) + v)
        self.add_endpoints(other.endpoints)

    def as_dict(self) -> dict:
        """The cost as numbers; with endpoints, also ``endpoints`` (per URL), ``endpoints_down`` (times one was marked
        down) and ``requests_moved`` (requests that moved to another after a failure): never hidden."""
        out = asdict(self)
        del out["endpoints"]
        if self.endpoints:
            out["endpoints"] = {url: dict(c) for url, c in self.endpoints.items()}
            out["endpoints_down"] = sum(c.get("marked_down", 0) for c in self.endpoints.values())
            out["requests_moved"] = sum(c.get("moved", 0) for c in self.endpoints.values())
        return out


@dataclass(frozen=True)
class GeneratedRubric:
    """One generator output. ``permutation[k]`` is the original index of the candidate shown k-th (label k+1);
    empty in static mode. ``rubric`` is None (unscorable) when the output was cut or did not parse; ``error``
    says why."""

    item: int
    seed: int
    permutation: tuple[int, ...]
    text: str
    finish_reason: str
    rubric: Rubric | None
    error: str | None
    prompt_tokens: int
    completion_tokens: int

    @property
    def dropped(self) -> int:
        """Items seen in the output but not usable (repeated, malformed), when the rest made a rubric."""
        return self.rubric.dropped if self.rubric is not None else 0


@dataclass(frozen=True)
class Check:
    """One verification: does ``response`` to ``prompt`` meet ``criterion``?"""

    prompt: str
    response: str
    criterion: str


@dataclass(frozen=True)
class ScoredRubric:
    """One rubric applied to one set.

    verdicts: (N candidates, M items) of 1/0/None; scores: (N,) Eq. 12 (None where a verdict is missing);
    r_disc: Eq. 13 over the candidates; anchor_verdicts / anchor_scores / r_anchor: the same on the anchor list
    (None when the item has none). Everything is None when the rubric itself is unscorable. ``unscorable`` lists
    what could not be scored, empty when everything was.
    """

    generation: GeneratedRubric
    verdicts: list[list[int | None]] | None
    scores: list[float | None] | None
    r_disc: float | None
    anchor_verdicts: list[list[int | None]] | None = None
    anchor_scores: list[float | None] | None = None
    r_anchor: float | None = None
    unscorable: list[str] = field(default_factory=list)


@dataclass
class SetEvaluation:
    """``results[i][s]``: the rubric of seed ``seeds[s]`` for ``items[i]``, scored. Stats per stage."""

    items: list[EvalItem]
    seeds: list[int]
    mode: Mode
    results: list[list[ScoredRubric]]
    generation: StageStats
    verification: StageStats
