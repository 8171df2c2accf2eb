"""The IFEval testbed's bundled data: training and tuning prompts with code-ranked anchors, and IFEval's own prompts
held out.

- Training and tuning (``dr_core/data/ifeval_train.jsonl``, ``ifeval_tune.jsonl``): the 48 bundled AlpacaEval
  prompts (``anchors_alpacaeval.jsonl``), the first 36 for training and the last 12 for tuning, each in two variants
  with 1-3 instructions attached by template (``dr_core.ifeval.constraints.attach``, seeded by the variant). Each
  line is at once an IFEval row (``id``, ``prompt``, ``instruction_id_list``, ``kwargs``: what ``dr eval-policy
  --task ifeval`` reads) and a ranked anchor list (``responses`` best first and ``scores``, the number of instructions
  each meets: what ``dr ingest anchors`` reads). The anchors are the prompt's best AlpacaEval answer edited by code to
  meet n, n-1, ..., 0 of its instructions (``dr_core.ifeval.edits.anchor_list``); a prompt whose edits cannot give a
  strict list is left out (counted by ``build``).
- Held out: IFEval's 541 prompts (``ifeval_input_data.jsonl``, google-research's file byte for byte, Apache-2.0,
  ``ifeval_LICENSE.txt``), never trained or tuned on. ``heldout(n)`` is the first n of them in file order whose
  checkers run here (64 need nltk's punkt data: ``dr_core.ifeval.checks``).

The two generated files are rebuilt byte for byte by (a test checks they are current)::

    python -m dr_core.ifeval.testbed            # rewrites dr_core/data/ifeval_train.jsonl and ifeval_tune.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass

from dr_core.datasets import RankedList, load
from dr_core.ifeval.checks import IFEvalRow, load_rows, scorable, unavailable_instructions
from dr_core.ifeval.constraints import attach
from dr_core.ifeval.edits import anchor_list, sentences
from dr_core.paths import DATA_DIR, bundled

SOURCE = "anchors_alpacaeval.jsonl"
HELDOUT_FILE = "ifeval_input_data.jsonl"
SPLIT_FILES = {"train": "ifeval_train.jsonl", "tune": "ifeval_tune.jsonl"}
#: Base prompts of the tuning split: the last ones of the source file (the rest train).
TUNE_PROMPTS = 12
#: The template variants of each base prompt (each a seed of ``attach``).
VARIANTS = (0, 1)


@dataclass(frozen=True)
class Prompt:
    """One prompt of the testbed: its IFEval row (the instructions the code checks) and, for the training and tuning
    splits, its ranked anchors (best first; ``scores``: instructions met)."""

    row: IFEvalRow
    anchors: RankedList | None = None


def build_split(sources: list[RankedList]) -> tuple[list[dict], int]:
    """The lines of a split from its source prompts, and how many (prompt, variant) pairs gave no strict anchors."""
    lines, dropped = [], 0
    for src in sources:
        content = src.responses[0]
        sents = sentences(content)
        words = sum(len(s.split()) for s in sents)
        for v in VARIANTS:
            n = random.Random(f"n:{v}:{src.id}").randint(1, 3)
            row = attach(f"{src.id}-v{v}", src.prompt, n, v, words, len(sents))
            levels = anchor_list(row, content)
            if levels is None:
                dropped += 1
                continue
            lines.append(
                row.as_json()
                | {
                    "source": f"{src.id} best answer, edited by code (dr_core/ifeval/edits.py)",
                    "responses": [lv.text for lv in levels],
                    "scores": [lv.met for lv in levels],
                }
            )
    return lines, dropped


def build() -> dict[str, tuple[list[dict], int]]:
    """Both splits' lines (and dropped pairs) from the bundled source file."""
    sources = load(bundled(SOURCE), "ranked")
    return {
        "train": build_split(sources[: len(sources) - TUNE_PROMPTS]),
        "tune": build_split(sources[len(sources) - TUNE_PROMPTS :]),
    }


def render(lines: list[dict]) -> str:
    """A split's file text (one JSON object a line, keys in a fixed order)."""
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def split(name: str) -> list[Prompt]:
    """The bundled training or tuning split: each prompt's IFEval row and its anchors."""
    path = bundled(SPLIT_FILES[name])
    anchors = {r.id: r for r in load(path, "ranked")}
    return [Prompt(row, anchors[row.id]) for row in load_rows(path)]


def heldout(n: int | None = None, start: int = 0) -> list[Prompt]:
    """``n`` held-out IFEval prompts (file order) whose checkers all run here, from the ``start``-th such prompt on;
    all of them for None."""
    missing = unavailable_instructions()
    rows = [r for r in load_rows(bundled(HELDOUT_FILE)) if scorable(r, missing)]
    return [Prompt(r) for r in rows[start : None if n is None else start + n]]


def main(argv: list[str]) -> int:
    out = DATA_DIR
    for name, (lines, dropped) in build().items():
        path = out / SPLIT_FILES[name]
        path.write_text(render(lines), encoding="utf-8")
        print(f"{path}: {len(lines)} prompts ({dropped} without strict anchors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
