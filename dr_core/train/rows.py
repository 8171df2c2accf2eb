"""The inputs of one GRPO update: one ``GeneratorRow`` per response set (generator update) or one ``PolicyRow`` per
prompt (policy update), and the ``OnRollouts`` callback the update hands its rollout records to (their shapes:
``dr_core.train.rewards``).

    python -c "from dr_core.train.rows import PolicyRow; print(PolicyRow(0, 'p0', 'Say hi.'))"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

OnRollouts = Callable[[list[dict]], None]


@dataclass(frozen=True)
class GeneratorRow:
    """One generator training example: prompt x, the current policy's response set C, the ranked anchor list
    (best first; at least 2). ``group_id`` is unique within a call."""

    group_id: int
    prompt: str
    candidates: tuple[str, ...]
    anchors: tuple[str, ...]


@dataclass(frozen=True)
class PolicyRow:
    """One policy training prompt. ``group_id`` is unique within a call; ``prompt_id`` is the store's id."""

    group_id: int
    prompt_id: str
    prompt: str
