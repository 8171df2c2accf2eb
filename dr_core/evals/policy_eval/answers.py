"""Where the answers of a policy evaluation come from (dr_core/evals/policy_eval/run.py): an engine answering every
prompt (policy system prompt, greedy by default), a file of saved {"id","answer"} answers matched by id, or the data
file's own ``baseline`` answers (or another policy_eval file's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dr_core.datasets import DataError, PromptRow, load
from dr_core.engines import PROMPT_TOO_LONG, Engine
from dr_core.rubric import prompts


@dataclass(frozen=True)
class Answer:
    """One answer to a prompt: its text, tokens (None for a fixed answer from a file), whether it was cut by
    max_tokens, whether the prompt did not fit the engine's context at all."""

    text: str
    tokens: int | None = None
    truncated: bool = False
    prompt_too_long: bool = False


def answer_prompts(
    engine: Engine, texts: Sequence[str], *, max_tokens: int, temperature: float = 0.0, seed: int = 0
) -> list[Answer]:
    """The engine's answer to every prompt (policy system prompt; greedy by default), in one batched call."""
    outs = engine.chat(
        [prompts.policy_messages(t) for t in texts], n=1, temperature=temperature, max_tokens=max_tokens, seed=seed
    )
    return [
        Answer(o.texts[0], o.completion_tokens[0], o.truncated[0], o.finish_reasons[0] == PROMPT_TOO_LONG) for o in outs
    ]


def fixed_baseline(rows: Sequence[PromptRow]) -> list[Answer]:
    """The rows' own baseline answers (ValueError naming the ids that have none)."""
    missing = [r.id for r in rows if r.baseline is None]
    if missing:
        raise ValueError(f"no baseline answer for id(s) {missing[:5]}: give --baseline CKPT or a file with them")
    return [Answer(r.baseline) for r in rows]


def _first_object(path: str | Path) -> dict:
    import json

    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else {}
    except (OSError, ValueError):
        pass
    return {}  # load() reports what is wrong with the file, with its line


def answers_from_file(rows: Sequence, path: str | Path, who: str) -> list[Answer]:
    """Saved answers ({"id", "answer"} JSONL, every line validated) for ``rows``, matched by id; rows of the file that
    no prompt asks for are ignored. DataError naming the first prompt without an answer."""
    given = {a.id: a for a in load(path, "answers")}
    out = []
    for r in rows:
        a = given.get(r.id)
        if a is None:
            raise DataError(
                path, 0, "id", f"no {who} answer with id {r.id!r} (the prompt on line {r.line} of the data file)"
            )
        out.append(Answer(a.answer))
    return out


def baseline_from_file(rows: Sequence[PromptRow], path: str | Path) -> list[PromptRow]:
    """``rows`` with their baseline answers taken from ``path``, matched by id: saved answers ({"id","answer"}) or
    the policy_eval format ({"id","prompt","baseline"}). DataError for a prompt with no row in ``path`` (naming the
    prompt's id) or a row without a ``baseline`` (naming its line)."""
    if "answer" in _first_object(path):
        return [
            PromptRow(r.id, r.prompt, a.text, r.line) for r, a in zip(rows, answers_from_file(rows, path, "baseline"))
        ]
    given = {r.id: r for r in load(path, "policy_eval")}
    out = []
    for r in rows:
        b = given.get(r.id)
        if b is None:
            raise DataError(path, 0, "id", f"no row with id {r.id!r} (the prompt on line {r.line} of the data file)")
        if b.baseline is None:
            raise DataError(path, b.line, "baseline", f"missing: no baseline answer for id {r.id!r}")
        out.append(PromptRow(r.id, r.prompt, b.baseline, r.line))
    return out
