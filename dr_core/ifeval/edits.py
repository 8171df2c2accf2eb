"""Ranked anchors by code: one answer, edited by code to meet n, n-1, ..., 0 of a prompt's instructions, so that the
number of instructions met orders the list strictly and its content stays the same.

``anchor_list(row, content)`` turns ``content`` (a good answer's text, or any answer) into its sentences, cleaned of
everything an IFEval checker looks at (``*`` marks, brackets, ``<<``/``>>``, section words, ``P.S.``, the row's
keywords), then renders one response per level: the first j instructions of an order are met (``meet``), the rest
broken. Each level is checked by the library's own checkers (``dr_core.ifeval.checks``): a list is kept only when
every level meets exactly the count it was built for, trying the orders of the editable instructions in turn, so the
truth is always the checker's, never the edit's intent. An instruction without an edit here (``EDITABLE`` lists those
with one) is left as the content has it: the same in every level.

What each edit does to meet (and to break) its instruction is one branch of ``_render``: the keyword instructions
add (or leave out) a sentence with the words; placeholders, the title, a postscript and the end phrase are added (or
not); highlights wrap the first words of sentences in ``*``; bullets, ``***`` paragraphs and ``SECTION X`` headers lay
the sentences out (one fewer, or none, to break); lowercase, capitals and commas change the characters (a capital, a
lowercase letter or a comma is put in to break); the quotation wraps the whole text; the word count trims sentences
from the end (and breaks by trimming, or by keeping them all).

    python -c "from dr_core.ifeval.edits import EDITABLE; print(sorted(EDITABLE))"
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

from dr_core.ifeval.checks import IFEvalRow, check

#: Instructions with an edit that meets them and one that breaks them.
EDITABLE = frozenset(
    {
        "keywords:existence",
        "keywords:frequency",
        "keywords:forbidden_words",
        "detectable_content:number_placeholders",
        "detectable_content:postscript",
        "detectable_format:title",
        "detectable_format:number_highlighted_sections",
        "detectable_format:number_bullet_lists",
        "detectable_format:multiple_sections",
        "length_constraints:number_paragraphs",
        "length_constraints:number_words",
        "change_case:english_lowercase",
        "change_case:english_capital",
        "punctuation:no_comma",
        "startend:end_checker",
        "startend:quotation",
    }
)
#: The edits that lay the sentences out: one response has one layout, so only one of them is edited.
LAYOUTS = (
    "detectable_format:number_bullet_lists",
    "length_constraints:number_paragraphs",
    "detectable_format:multiple_sections",
)
_CLEAN = [
    (re.compile(r"[*\[\]<>\"“”]"), ""),
    (re.compile(r"\b(p\.\s?p\.\s?s|p\.\s?s)\.?", re.I), ""),
    (re.compile(r"\b(section|paragraph)\s?\d+", re.I), ""),
    (re.compile(r"^\s*(?:[-•]|\d+[.)])\s*", re.M), ""),
    (re.compile(r"\s+"), " "),
]
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
#: The most sentences and words of content an anchor keeps (responses stay short: the verifier reads every one).
MAX_SENTENCES = 6
MAX_WORDS = 110


def sentences(text: str, max_sentences: int = MAX_SENTENCES, max_words: int = MAX_WORDS) -> list[str]:
    """The text's first sentences (at most ``max_sentences``, and no more once ``max_words`` are reached; at least
    one), cleaned of what the checkers count (marks, brackets, section words, list markers)."""
    for pattern, repl in _CLEAN:
        text = pattern.sub(repl, text)
    out, words = [], 0
    for s in _SENTENCE.split(text.strip()):
        s = s.strip()
        n = len(s.split())
        if n < 2:
            continue
        if out and (len(out) >= max_sentences or words + n > max_words):
            break
        out.append(s)
        words += n
    return out


@dataclass(frozen=True)
class Level:
    """One rendered anchor: the instructions it was built to meet, its text, and the checker's strict count."""

    meets: tuple[str, ...]
    text: str
    met: int


def _drop_words(sents: list[str], words) -> list[str]:
    """The sentences without any that contain one of ``words`` (as a substring, any case: what the keyword checkers
    search for)."""
    return [s for s in sents if not any(w.lower() in s.lower() for w in words)]


def _keywords(row: IFEvalRow) -> list[str]:
    words = []
    for iid, kw in zip(row.instruction_id_list, row.kwargs):
        if iid == "keywords:existence":
            words += kw.get("keywords", [])
        elif iid == "keywords:frequency":
            words.append(kw.get("keyword", ""))
        elif iid == "keywords:forbidden_words":
            words += kw.get("forbidden_words", [])
    return [w for w in words if w]


def _groups(items: list[str], n: int) -> list[list[str]]:
    """``items`` in ``n`` consecutive non-empty groups (None-free; fewer items than groups: fewer groups)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _layout(sents: list[str], iid: str | None, kw: dict, meet: bool) -> str:
    """The sentences laid out: plain (one paragraph), bullets, ``***`` paragraphs or ``SECTION X`` sections."""
    if iid is None:
        return " ".join(sents)
    if iid == "detectable_format:number_bullet_lists":
        n = kw["num_bullets"] if meet else (kw["num_bullets"] + 1 if kw["num_bullets"] < len(sents) else 0)
        if n == 0:
            return " ".join(sents)
        return "\n".join("* " + " ".join(g) for g in _groups(sents, n))
    if iid == "length_constraints:number_paragraphs":
        n = kw["num_paragraphs"] if meet else (kw["num_paragraphs"] + 1 if kw["num_paragraphs"] == 1 else 1)
        return "\n\n***\n\n".join(" ".join(g) for g in _groups(sents, n))
    spliter = kw.get("section_spliter", "SECTION")
    n = kw["num_sections"] if meet else kw["num_sections"] - 1
    if n <= 0:
        return " ".join(sents)
    return "\n\n".join(f"{spliter} {i + 1}\n" + " ".join(g) for i, g in enumerate(_groups(sents, n)))


def _render(row: IFEvalRow, sents: list[str], edited: tuple[str, ...], meets: frozenset[str], limit: int) -> str:
    """One response: ``sents[:limit]`` with every instruction of ``edited`` met (in ``meets``) or broken."""
    kws = dict(zip(row.instruction_id_list, row.kwargs))
    on = {i: (i in meets) for i in edited}
    body = list(sents[:limit])
    extra: list[str] = []
    if "keywords:existence" in on and on["keywords:existence"]:
        extra.append("It also covers " + " and ".join(kws["keywords:existence"]["keywords"]) + ".")
    if "keywords:frequency" in on:
        kw = kws["keywords:frequency"]
        add = on["keywords:frequency"] == (kw["relation"] == "at least")
        if add:
            extra.append("Note " + " ".join([kw["keyword"]] * max(kw["frequency"], 1)) + ".")
    if "keywords:forbidden_words" in on and not on["keywords:forbidden_words"]:
        extra.append("It is about " + kws["keywords:forbidden_words"]["forbidden_words"][0] + ".")
    if "detectable_content:number_placeholders" in on and on["detectable_content:number_placeholders"]:
        n = kws["detectable_content:number_placeholders"]["num_placeholders"]
        extra.append("Fill in " + " ".join(f"[field {i + 1}]" for i in range(n)) + ".")
    if "detectable_format:number_highlighted_sections" in on and on["detectable_format:number_highlighted_sections"]:
        n = kws["detectable_format:number_highlighted_sections"]["num_highlights"]
        for i in range(min(n, len(body))):
            first, _, rest = body[i].partition(" ")
            body[i] = f"*{first}* {rest}".strip()
        extra += [f"*note {i + 1}* applies." for i in range(max(0, n - len(body)))]
    layout = next((i for i in LAYOUTS if i in on), None)
    text = _layout(body + extra, layout, kws.get(layout, {}), on.get(layout, False))
    if "detectable_format:title" in on and on["detectable_format:title"]:
        text = "<<" + " ".join(sents[0].split()[:3]).strip(".,;:!?") + ">>\n\n" + text
    if "detectable_content:postscript" in on and on["detectable_content:postscript"]:
        text += "\n\n" + kws["detectable_content:postscript"]["postscript_marker"] + " That is all."
    if "startend:end_checker" in on and on["startend:end_checker"]:
        text += "\n\n" + kws["startend:end_checker"]["end_phrase"]
    text = _characters(text, on)
    if on.get("startend:quotation"):
        text = '"' + text + '"'
    return text


def _characters(text: str, on: dict[str, bool]) -> str:
    """The case and comma edits, after the layout (a section word keeps its case: the checker matches it exactly)."""
    if on.get("change_case:english_lowercase"):
        text = text.lower()
    elif on.get("change_case:english_capital"):
        text = text.upper()
    else:
        if "change_case:english_lowercase" in on and text.islower():
            text = text[0].upper() + text[1:]
        if "change_case:english_capital" in on and text.isupper():
            text = text + " ok"
    if on.get("punctuation:no_comma"):
        text = text.replace(", ", " ").replace(",", "")
    elif "punctuation:no_comma" in on and "," not in text:
        first, _, rest = text.partition(" ")
        text = f"{first}, {rest}" if rest else text + ","
    return text


def _limit(row: IFEvalRow, sents, edited, meets) -> int | None:
    """How many sentences a level keeps: all, unless the word count is edited (then the most that meet or break it
    as the level needs, from the full count down); None when no length does."""
    if "length_constraints:number_words" not in edited:
        return len(sents)
    from dr_core.ifeval.checks import build_checker

    kw = dict(zip(row.instruction_id_list, row.kwargs))["length_constraints:number_words"]
    checker = build_checker("length_constraints:number_words", kw, row.prompt)
    want = "length_constraints:number_words" in meets
    for limit in range(len(sents), 0, -1):
        if checker.check_following(_render(row, sents, edited, meets, limit)) == want:
            return limit
    return None


def editable(row: IFEvalRow) -> tuple[str, ...]:
    """The row's instructions that the edits change, in the row's order (one layout at most)."""
    out, layout = [], False
    for iid in row.instruction_id_list:
        if iid not in EDITABLE or iid in out:
            continue
        if iid in LAYOUTS:
            if layout:
                continue
            layout = True
        out.append(iid)
    return tuple(out)


def anchor_list(row: IFEvalRow, content: str, *, max_orders: int = 6) -> list[Level] | None:
    """Responses meeting n, n-1, ..., 0 of the row's editable instructions (best first; n = how many it has), each
    one's count of ALL the row's instructions met (the checker's, strict) exactly one below the previous one. None when
    no order of the edits gives such a list (or the content has fewer than two sentences)."""
    sents = _drop_words(sentences(content), _keywords(row))
    edited = editable(row)
    if len(sents) < 2 or not edited:
        return None
    for order in itertools.islice(itertools.permutations(edited), max_orders):
        levels = _levels(row, sents, edited, order)
        if levels is not None:
            return levels
    return None


def _levels(row: IFEvalRow, sents, edited, order) -> list[Level] | None:
    out: list[Level] = []
    for j in range(len(order), -1, -1):
        meets = frozenset(order[:j])
        limit = _limit(row, sents, edited, meets)
        if limit is None:
            return None
        text = _render(row, sents, edited, meets, limit)
        met = sum(v.strict for v in check(row, text))
        if out and met != out[-1].met - 1:
            return None
        out.append(Level(tuple(i for i in order[:j]), text, met))
    return out


def with_kwargs(row: IFEvalRow, **updates) -> IFEvalRow:
    """The row with some instructions' kwargs replaced (``{instruction_id: kwargs}``)."""
    kwargs = tuple(updates.get(i, k) for i, k in zip(row.instruction_id_list, row.kwargs))
    return replace(row, kwargs=kwargs)
