"""Verifiable instructions attached to prompts by template: the training and tuning prompts of the IFEval testbed.

``attach`` draws 1-3 instructions for a prompt (from ``dr_core.ifeval.edits.EDITABLE``, so that every prompt gets
code-ranked anchors), never two that conflict (the registry's ``INSTRUCTION_CONFLICTS``, made symmetric, plus the
pairs the edits cannot combine: two layouts, sections with a case change), and builds each one with the library's own
instruction registry: ``build_description`` draws the instruction's arguments (keywords, counts, markers) and writes
its text, which is appended to the prompt as IFEval's prompts carry theirs. Two arguments are drawn here instead,
because the registry's ranges are for long answers: the word count (``num_words`` between a third of the answer's
length and its length less ten words, so that the anchors can meet and break it by trimming sentences) and the
highlight, bullet, paragraph and section counts (at most the answer's sentences).

Draws are seeded by (seed, prompt id): the same call gives the same row on every machine. The registry draws with
Python's global ``random``; its state is saved and restored around each draw, so nothing else in the process sees
the seeding.

    python -c "from dr_core.ifeval.constraints import attach; print(attach('p1', 'Describe a cat.', 2, 0, 120))"
"""

from __future__ import annotations

import random

from dr_core.ifeval.checks import IFEvalRow, registry, seeded_global_random
from dr_core.ifeval.edits import EDITABLE, LAYOUTS

#: Pairs the edits cannot combine in one response, on top of the registry's conflicts.
_EXTRA_CONFLICTS = [(a, b) for a in LAYOUTS for b in LAYOUTS if a != b] + [
    ("detectable_format:multiple_sections", "change_case:english_lowercase"),
    ("detectable_format:multiple_sections", "change_case:english_capital"),
    ("detectable_format:number_bullet_lists", "detectable_format:number_highlighted_sections"),
]


def conflicts() -> dict[str, set[str]]:
    """Instruction id -> the ids it may not be combined with (symmetric; every id conflicts with itself)."""
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_CONFLICTS

    table = {k: set(v) for k, v in INSTRUCTION_CONFLICTS.items()}
    for a, b in _EXTRA_CONFLICTS:
        table.setdefault(a, set()).add(b)
    for key in list(table):
        for other in list(table[key]):
            table.setdefault(other, set()).add(key)
        table[key].add(key)
    return table


def _our_arguments(iid: str, rng: random.Random, sentences: int, words: int) -> dict:
    """The arguments drawn here rather than by the registry (module docstring), {} for the rest."""
    most = max(1, min(4, sentences - 1))
    if iid == "length_constraints:number_words":
        low, high = max(10, words // 3), max(11, words - 10)
        return {"num_words": rng.randint(low, high), "relation": rng.choice(["less than", "at least"])}
    if iid == "detectable_format:number_highlighted_sections":
        return {"num_highlights": rng.randint(1, most)}
    if iid == "detectable_format:number_bullet_lists":
        return {"num_bullets": rng.randint(2, max(2, most))}
    if iid == "length_constraints:number_paragraphs":
        return {"num_paragraphs": rng.randint(2, max(2, most))}
    if iid == "detectable_format:multiple_sections":
        return {"num_sections": rng.randint(2, max(2, most))}
    return {}


def attach(prompt_id: str, prompt: str, n: int, seed: int, answer_words: int, answer_sentences: int = 6) -> IFEvalRow:
    """``prompt`` with ``n`` non-conflicting instructions drawn for it and their texts appended (IFEval's shape; its
    id is ``prompt_id``). ``answer_words`` / ``answer_sentences``: the length of the answer its anchors are edited
    from (module docstring)."""
    rng = random.Random(f"{seed}:{prompt_id}")
    table = conflicts()
    pool = sorted(EDITABLE)
    chosen: list[str] = []
    while len(chosen) < n:
        free = [i for i in pool if not any(i in table.get(c, {c}) for c in chosen)]
        if not free:
            break
        chosen.append(rng.choice(free))
    texts, kwargs = [], []
    for iid in chosen:
        ours = _our_arguments(iid, rng, answer_sentences, answer_words)
        with seeded_global_random(rng.randrange(2**32)):
            checker = registry()[iid](iid)
            texts.append(checker.build_description(**ours))
        kwargs.append({k: v for k, v in (checker.get_instruction_args() or {}).items() if v is not None})
    return IFEvalRow(prompt_id, prompt.rstrip() + "\n\n" + "\n".join(texts), tuple(chosen), tuple(kwargs))
