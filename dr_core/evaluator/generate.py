"""Rubric generation, batch first: one rubric per (item, seed).

In dynamic mode the generator sees the item's candidates in an order shuffled by
``random.Random(f"{seed}:{item_index}")`` (the permutation is kept); in static mode (RaR baseline) it sees the
prompt only. Output is parsed by the total parser (``dr_core.rubric.schema.parse_rubric``); a rubric that cannot be
used carries its error, never a guess.
"""

from __future__ import annotations

import random
import time
from typing import Sequence

from dr_core.constants import UNSCORABLE
from dr_core.engines.base import FINISH_LENGTH, Engine
from dr_core.evaluator.endpoints import endpoint_counts, endpoint_delta
from dr_core.evaluator.items import (
    DEFAULT_SAMPLING,
    DONE_REASONS,
    EvalItem,
    GeneratedRubric,
    Mode,
    RubricFormat,
    RubricSampling,
    StageStats,
)
from dr_core.rubric import prompts
from dr_core.rubric.schema import Rubric, RubricError, parse_free_rubric, parse_rubric


def shuffled_order(n: int, seed: int, item_index: int) -> tuple[int, ...]:
    """The order (original indices) in which the generator sees n candidates for this (seed, item)."""
    order = list(range(n))
    random.Random(f"{seed}:{item_index}").shuffle(order)
    return tuple(order)


def _parse_lines(text: str, finish_reason: str) -> tuple[Rubric | None, str | None]:
    """A rubric in the 'lines' format (the primer included in ``text``): every complete line kept; an output cut by
    max_tokens keeps its complete lines and loses the cut one, as the generator's GRPO rollouts are parsed."""
    if finish_reason not in DONE_REASONS and finish_reason != FINISH_LENGTH:
        return UNSCORABLE, f"generation_{finish_reason}"  # the prompt did not fit
    parsed = parse_free_rubric(text, truncated=finish_reason == FINISH_LENGTH)
    if isinstance(parsed, Rubric):
        return parsed, None
    return UNSCORABLE, str(parsed.reason.value)


def _parse(text: str, finish_reason: str, structured: bool) -> tuple[Rubric | None, str | None]:
    """A complete generation parsed strictly; failing that, every complete item is kept (``Rubric.dropped`` counts
    the rest: a small model under a grammar still repeats criteria). The strict reason is kept when nothing is."""
    if finish_reason not in DONE_REASONS:
        return UNSCORABLE, f"generation_{finish_reason}"  # cut by max_tokens, or the prompt did not fit
    parsed = parse_rubric(text)
    if isinstance(parsed, RubricError):
        recovered = parse_rubric(text, recover=True)
        if isinstance(recovered, Rubric):
            return recovered, None
        return UNSCORABLE, str((parsed if structured else recovered).reason.value)
    return parsed, None


def generate_rubrics(
    engine: Engine,
    items: Sequence[EvalItem],
    seeds: Sequence[int],
    sampling: RubricSampling = DEFAULT_SAMPLING,
    *,
    order_keys: Sequence[int] | None = None,
) -> tuple[list[list[GeneratedRubric]], StageStats]:
    """One rubric for every (item, seed), in one engine call. Returns ``rubrics[i][s]`` and the stage's cost.

    ``sampling.rubric_format``: "json" (the structured-output prompt; ``sampling.structured`` constrains it to
    ``prompts.GENERATOR_JSON_SCHEMA``, False lets the model write freely) or "lines" (the prompt and primer a
    generator is trained with, ``prompts.LINES_ROLLOUT_PREFIX`` as the start of its answer, never constrained; the
    text kept and parsed includes the primer, and an output cut by max_tokens keeps its complete lines). Either way a
    complete output keeps every usable item (``parse_rubric(recover=True)``).

    order_keys: the key each item's shuffle uses in place of its index (``shuffled_order(n, seed, key)``): the
    reward service batches unrelated requests together, and a request's order must not depend on its neighbours.

    The stats of an engine with endpoints (``endpoint_stats``) carry what its endpoints did during the call:
    ``endpoints``, ``endpoints_down``, ``requests_moved`` (dr_core/evaluator/endpoints.py).
    """
    if not seeds:
        raise ValueError("need at least one seed")
    lines, structured = sampling.rubric_format == "lines", sampling.structured
    convs, keys = _conversations(items, seeds, sampling.mode, order_keys, sampling.rubric_format)
    stats = StageStats()
    if not convs:
        return [[] for _ in items], stats
    before = endpoint_counts(engine)
    start = time.perf_counter()
    outs = engine.chat(
        convs,
        n=1,
        temperature=sampling.temperature,
        max_tokens=sampling.max_tokens,
        json_schema=prompts.GENERATOR_JSON_SCHEMA if structured and not lines else None,
        seed=seeds[0],
    )
    stats.add(outs, time.perf_counter() - start)
    stats.add_endpoints(endpoint_delta(before, endpoint_counts(engine)))
    result: list[list[GeneratedRubric]] = [[] for _ in items]
    for (i, seed, perm), out in zip(keys, outs):
        result[i].append(_generated(i, seed, perm, out, lines, structured))
    return result, stats


def _generated(i: int, seed: int, perm: tuple[int, ...], out, lines: bool, structured: bool) -> GeneratedRubric:
    """One engine output as a ``GeneratedRubric``: its text (the primer first in the 'lines' format) and parse."""
    text = (prompts.LINES_ROLLOUT_PREFIX if lines else "") + out.texts[0]
    if lines:
        rubric, error = _parse_lines(text, out.finish_reasons[0])
    else:
        rubric, error = _parse(text, out.finish_reasons[0], structured)
    return GeneratedRubric(
        i, seed, perm, text, out.finish_reasons[0], rubric, error, out.prompt_tokens, out.completion_tokens[0]
    )


def _conversations(
    items: Sequence[EvalItem],
    seeds: Sequence[int],
    mode: Mode,
    order_keys: Sequence[int] | None,
    rubric_format: RubricFormat = "json",
) -> tuple[list, list[tuple[int, int, tuple[int, ...]]]]:
    """The generator's conversations, one per (item, seed), and each one's (item index, seed, candidate order); in
    the 'lines' format each ends with the primer as the start of the assistant's answer."""
    convs, keys = [], []
    primer = [{"role": "assistant", "content": prompts.LINES_ROLLOUT_PREFIX}] if rubric_format == "lines" else []
    for i, item in enumerate(items):
        for seed in seeds:
            if mode == "dynamic":
                perm = shuffled_order(len(item.candidates), seed, i if order_keys is None else order_keys[i])
                shown = [item.candidates[k] for k in perm]
                convs.append(prompts.dynamic_generator_messages(item.prompt, shown, answer=rubric_format) + primer)
            else:
                perm = ()
                convs.append(prompts.static_generator_messages(item.prompt))
            keys.append((i, seed, perm))
    return convs, keys
