"""IFEval's checkers, from the kept library ``if-verifiable`` (0.1.2, Apache-2.0; its ``ifeval`` registry is Google's
IFEval code): the rows they check, the validation of a row before any model work, and the strict and loose verdict of
every instruction of a row on a response.

A row is IFEval's own shape, ``{"key" | "id", "prompt", "instruction_id_list", "kwargs"}`` (``load_rows``). Every
line is checked before anything else runs: an instruction id the registry does not have, kwargs that the
instruction's ``build_description`` does not take, or values it refuses are one ``DataError`` naming the file, the line
and the field (``kwargs[1].relation``). Keys whose value is null are ignored, as the library ignores them (the Hugging
Face copy of IFEval gives every key to every instruction, null where unused).

Checking (``check``) is the library's own ``if_verifiable.common.evaluate_instructions``: the strict verdict on the
response as it is, the loose one on any of its eight loose variants (first or last line dropped, ``*`` removed),
with Python's global ``random`` and langdetect seeded, so that a verdict is the same every time (a checker given an
invalid argument draws a random one: ``seeded_global_random``). One
difference is kept on purpose: an empty response fails every instruction (the library then returns no results at all,
which would drop its instructions from the instruction-level count; lm-eval counts them as failed).

Two checkers need nltk's punkt tokenizer data, which no installed package ships and nothing here may download:
``length_constraints:number_sentences`` (``count_sentences``) and ``change_case:capital_word_frequency``
(``nltk.word_tokenize``). They are available when nltk finds the data (``NLTK_DATA``), and otherwise a row that uses
one is *unscorable* (``unavailable_instructions``): counted and named, never scored as a failure.

    python -c "from dr_core.ifeval.testbed import heldout; from dr_core.ifeval.checks import check; \\
        print(check(heldout(2)[1].row, 'hello'))"
"""

from __future__ import annotations

import functools
import random
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from dr_core.datasets import DataError, iter_lines

#: The instructions whose checker needs nltk's punkt data, and the nltk resource each needs.
PUNKT_INSTRUCTIONS = {
    "length_constraints:number_sentences": "tokenizers/punkt/english.pickle",
    "change_case:capital_word_frequency": "tokenizers/punkt_tab/english/",
}


@dataclass(frozen=True)
class IFEvalRow:
    """One IFEval prompt: its id (``key`` or ``id``), the prompt, and each instruction's id and kwargs (the non-null
    ones). ``line`` is where it came from (0: built in code)."""

    id: str
    prompt: str
    instruction_id_list: tuple[str, ...]
    kwargs: tuple[dict[str, Any], ...]
    line: int = dc_field(default=0, compare=False)

    def as_json(self) -> dict:
        """The row in IFEval's own shape (``key`` when the id is an integer, else ``id``)."""
        head = {"key": int(self.id)} if self.id.isdigit() else {"id": self.id}
        return head | {
            "prompt": self.prompt,
            "instruction_id_list": list(self.instruction_id_list),
            "kwargs": [dict(k) for k in self.kwargs],
        }


@dataclass(frozen=True)
class InstructionVerdict:
    """One instruction of a row on one response: strict (the response as it is) and loose (any loose variant)."""

    instruction_id: str
    strict: bool
    loose: bool


def registry() -> dict:
    """The library's IFEval registry: instruction id -> checker class."""
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

    return INSTRUCTION_DICT


@functools.lru_cache(maxsize=None)
def _nltk_has(resource: str) -> bool:
    import nltk

    try:
        nltk.data.find(resource)
    except LookupError:
        return False
    return True


def unavailable_instructions() -> frozenset[str]:
    """The instruction ids whose checker cannot run here (nltk's punkt data not found; never downloaded)."""
    return frozenset(i for i, res in PUNKT_INSTRUCTIONS.items() if not _nltk_has(res))


def build_checker(instruction_id: str, kwargs: dict[str, Any], prompt: str):
    """The library's checker for one instruction, built with its kwargs (null values dropped) as the library builds
    it. ``KeyError`` for an unknown id; ``TypeError`` / ``ValueError`` for kwargs it does not take."""
    checker = registry()[instruction_id](instruction_id)
    checker.build_description(**{k: v for k, v in kwargs.items() if v is not None})
    args = checker.get_instruction_args()
    if args and "prompt" in args:
        checker.build_description(prompt=prompt)
    return checker


def describe(instruction_id: str, kwargs: dict[str, Any], prompt: str) -> str:
    """The instruction's own text for these arguments, as the registry writes it (what a prompt says to do): the
    criterion a verifier is asked to check in the benchmark's gate."""
    with seeded_global_random(0):
        checker = registry()[instruction_id](instruction_id)
        return checker.build_description(**{k: v for k, v in kwargs.items() if v is not None})


def _row(path: Path, lineno: int, obj: dict) -> IFEvalRow:
    def err(field: str, msg: str) -> DataError:
        return DataError(path, lineno, field, msg)

    if "key" in obj:
        key = obj["key"]
        if isinstance(key, bool) or not isinstance(key, (int, str)) or (isinstance(key, str) and not key.strip()):
            raise err("key", "expected an integer or a non-empty string")
        row_id = str(key)
    elif "id" in obj:
        row_id = obj["id"]
        if isinstance(row_id, int) and not isinstance(row_id, bool):
            row_id = str(row_id)
        if not isinstance(row_id, str) or not row_id.strip():
            raise err("id", "expected an integer or a non-empty string")
    else:
        raise err("key", "missing (IFEval rows name themselves by 'key' or 'id')")
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise err("prompt", "missing" if "prompt" not in obj else "expected a non-empty string")
    ids = obj.get("instruction_id_list")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise err("instruction_id_list", "expected a non-empty list of instruction ids")
    kwargs = obj.get("kwargs")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise err("kwargs", f"expected a list of {len(ids)} objects, one per instruction")
    known = registry()
    clean = []
    for i, (iid, kw) in enumerate(zip(ids, kwargs)):
        if iid not in known:
            raise err(f"instruction_id_list[{i}]", f"unknown instruction id {iid!r} (IFEval has {len(known)})")
        if not isinstance(kw, dict):
            raise err(f"kwargs[{i}]", f"expected an object, got {type(kw).__name__}")
        kw = {k: v for k, v in kw.items() if v is not None}
        takes = set(known[iid](iid).get_instruction_args_keys())
        for k in kw:
            if k not in takes:
                took = ", ".join(sorted(takes)) or "none"
                raise err(f"kwargs[{i}].{k}", f"{iid} takes no argument {k!r} (it takes: {took})")
        try:
            build_checker(iid, kw, prompt)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise err(f"kwargs[{i}]", f"{iid} refuses these arguments: {exc}") from None
        clean.append(kw)
    return IFEvalRow(row_id, prompt, tuple(ids), tuple(clean), lineno)


def load_rows(path: str | Path, limit: int | None = None) -> list[IFEvalRow]:
    """Every row of an IFEval-shaped JSONL file, all validated first (``DataError`` file:line: field otherwise);
    duplicate ids refused; ``limit`` keeps the first N."""
    path = Path(path)
    rows, seen = [], {}
    for lineno, obj in iter_lines(path):
        row = _row(path, lineno, obj)
        if row.id in seen:
            raise DataError(path, lineno, "key", f"duplicate id {row.id!r} (first on line {seen[row.id]})")
        seen[row.id] = lineno
        rows.append(row)
    if not rows:
        raise DataError(path, 0, None, "no examples in file")
    return rows[:limit] if limit else rows


def scorable(row: IFEvalRow, unavailable: frozenset[str] | None = None) -> bool:
    """True when every checker of the row can run here."""
    unavailable = unavailable_instructions() if unavailable is None else unavailable
    return not any(i in unavailable for i in row.instruction_id_list)


def check(row: IFEvalRow, response: str) -> list[InstructionVerdict]:
    """The strict and loose verdict of each of the row's instructions on ``response`` (the library's
    ``evaluate_instructions``; an empty response fails them all). Raises ``ValueError`` for a row with an unavailable
    checker: test ``scorable`` first."""
    from if_verifiable.common import evaluate_instructions

    missing = [i for i in row.instruction_id_list if i in unavailable_instructions()]
    if missing:
        raise ValueError(f"row {row.id}: {missing[0]} needs nltk's punkt data, which is not installed")
    _deterministic_langdetect()
    with seeded_global_random(0):
        results, _scores = evaluate_instructions(
            response=response,
            instruction_id_list=list(row.instruction_id_list),
            kwargs_list=[dict(k) for k in row.kwargs],
            prompt=row.prompt,
            instruction_registry=registry(),
        )
    if not results:  # an empty response (or only a thinking block): the library returns none
        return [InstructionVerdict(i, False, False) for i in row.instruction_id_list]
    return [InstructionVerdict(r.instruction_id, bool(r.strict_pass), bool(r.loose_pass)) for r in results]


def strict_fraction(row: IFEvalRow, response: str) -> float:
    """The fraction of the row's instructions ``response`` meets, strictly (the positive control's reward)."""
    verdicts = check(row, response)
    return sum(v.strict for v in verdicts) / len(verdicts)


def _deterministic_langdetect() -> None:
    """langdetect samples its n-grams at random unless its factory is seeded (its README): seed it, so a check gives
    the same verdict every time (the English-case checkers and response_language use it)."""
    from langdetect import DetectorFactory

    DetectorFactory.seed = 0


@contextmanager
def seeded_global_random(seed: int):
    """Python's global ``random`` seeded for the registry's draws, its previous state restored afterwards. A
    checker draws from it when its arguments are missing or invalid: IFEval's own row 1122 gives the letter '#', which
    ``LetterFrequencyChecker`` replaces by a random letter, so without a fixed seed its verdict changes run to run."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
