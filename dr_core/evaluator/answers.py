"""Verifiable tasks (paper section 5.2, appendix C.3): pull the final answer out of a model response and check it
against the reference, three ways.

- ``exact``: the final answer (last ``\\boxed{}``, else an "answer is X" / "Answer: X" statement, else the last
  non-empty line) equals the reference after normalisation (case, surrounding whitespace, ``$``, trailing period,
  a wrapping ``\\text{}``). The paper scores MMLU-Pro and CodeScope this way.
- ``numeric``: the final number (last ``\\boxed{}``, else the last number in the text; ``1,234``, ``-3.5``, ``3/4``,
  ``50%`` read as numbers) equals the reference within ``rel_tol``/``abs_tol``.
- ``math``: mathematical equivalence through Hugging Face's Math-Verify (``math-verify`` on PyPI, Apache-2.0; the
  paper's MATH-500 checker): ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one answer. Math-Verify does its own
  extraction (last ``\\boxed{}`` first, then LaTeX and plain expressions).

A response with no extractable answer is wrong (False), not unscorable: the model gave no answer. A reference that
cannot be read for its task is bad input (``reference_error`` says why; the loader turns it into file:line: field).

    python -c "from dr_core.evaluator.answers import is_correct; print(is_correct('math', 'So \\\\boxed{0.5}.', '1/2'))"
"""

from __future__ import annotations

import logging
import math
import re
import threading
from fractions import Fraction
from typing import Literal

Task = Literal["exact", "numeric", "math"]
TASKS = ("exact", "numeric", "math")

#: Numeric tolerance: relative, and absolute for answers near zero.
REL_TOL = 1e-6
ABS_TOL = 1e-9

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?\s*%?|[-+]?\.\d+%?")
_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*[:]?\s*(.+)", re.IGNORECASE)


# -- extraction ------------------------------------------------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if there is none or it
    is cut off before its closing brace."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    i = starts[-1]
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (as written: ``1,234``, ``-3.5``, ``3/4``, ``50%``), or None."""
    found = _NUMBER.findall(text)
    return found[-1].strip() if found else None


def to_number(text: str) -> float | None:
    """A written number as a float: ``1,234`` -> 1234, ``3/4`` -> 0.75, ``50%`` -> 0.5, ``\\frac{1}{2}`` -> 0.5,
    ``$-2$`` -> -2. None if it is not one number."""
    s = text.strip().strip("$").strip()
    s = re.sub(r"^\\text\{(.*)\}$", r"\1", s)
    frac = re.fullmatch(r"([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}", s)
    if frac:
        s = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    s = s.replace(",", "").replace(" ", "").rstrip(".")
    percent = s.endswith("%") or s.endswith("\\%")
    s = s.removesuffix("%").removesuffix("\\")
    try:
        value = float(Fraction(s)) if "/" in s else float(s)
    except (ValueError, ZeroDivisionError, OverflowError):  # OverflowError: a fraction beyond float range
        return None
    if not math.isfinite(value):
        return None
    return value / 100 if percent else value


def normalise(text: str) -> str:
    """What exact match compares: case-folded, whitespace collapsed, ``$``, a wrapping ``\\text{}``, surrounding
    quotes/brackets of a single letter and a trailing period removed."""
    s = text.strip().strip("$").strip()
    s = re.sub(r"^\\text\{(.*)\}$", r"\1", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    single = re.fullmatch(r"[(\[\"'*]*([A-Za-z])[)\]\"'*]*", s)
    if single:
        s = single.group(1)
    return s.casefold()


def final_answer(text: str, task: Task) -> str | None:
    """The response's final answer as text, for ``exact`` and ``numeric`` (module docstring). None if none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if task == "numeric":
        return last_number(text)
    stated = _ANSWER_IS.findall(text)
    if stated:
        return stated[-1].strip().splitlines()[0].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else None


# -- matching -------------------------------------------------------------------------------------------------------
def _math_verify():
    try:
        import math_verify
    except ImportError as exc:  # pragma: no cover - the cpu/gpu extras install it
        raise RuntimeError("--task math needs the math-verify package (pip install math-verify==0.9.0)") from exc
    # Math-Verify logs a warning for every call with its timeout off; we turn it off in threads on purpose (below).
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return math_verify


def _timeout() -> int | None:
    """Math-Verify's timeout uses SIGALRM, which only the main thread may set: off in other threads (a Prefect
    task's), where the caller's own step timeout bounds the run."""
    return 5 if threading.current_thread() is threading.main_thread() else None


def _as_latex(reference: str) -> str:
    """A plain reference (``1/2``, ``x+1``) wrapped in ``$..$`` so Math-Verify reads it as one expression."""
    return reference if ("$" in reference or "\\boxed" in reference) else f"${reference}$"


def parse_math(text: str, *, reference: bool = False) -> list:
    """Math-Verify's parse (a list of candidate forms; empty when nothing could be read)."""
    mv = _math_verify()
    return mv.parse(_as_latex(text) if reference else text, parsing_timeout=_timeout())


def reference_error(task: Task, reference: str) -> str | None:
    """Why ``reference`` cannot be checked under ``task`` (None: it can)."""
    if task not in TASKS:
        return f"unknown task {task!r}; expected one of {', '.join(TASKS)}"
    if not reference.strip():
        return "empty reference answer"
    if task == "numeric" and to_number(reference) is None:
        return f"not a number: {reference!r}"
    if task == "math" and not parse_math(reference, reference=True):
        return f"Math-Verify cannot parse {reference!r}"
    return None


def is_correct(
    task: Task, response: str, reference: str, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL
) -> bool:
    """Does ``response``'s final answer match ``reference`` under ``task``? A response without an answer is wrong."""
    if task == "exact":
        got = final_answer(response, "exact")
        return got is not None and normalise(got) == normalise(reference)
    if task == "numeric":
        got = final_answer(response, "numeric")
        value, want = (to_number(got) if got is not None else None), to_number(reference)
        if want is None:
            raise ValueError(f"numeric reference is not a number: {reference!r}")
        return value is not None and math.isclose(value, want, rel_tol=rel_tol, abs_tol=abs_tol)
    if task == "math":
        mv = _math_verify()
        gold = parse_math(reference, reference=True)
        if not gold:
            raise ValueError(f"Math-Verify cannot parse the reference {reference!r}")
        pred = parse_math(response)
        return bool(pred) and bool(mv.verify(gold, pred, timeout_seconds=_timeout()))
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
