"""Deterministic fault injection: named points in the pipeline where a test makes the process fail on purpose.

A fault point is one call, ``fault_point("verify")``, placed where a real failure could strike. It does nothing
unless the environment variable ``DR_FAULT`` names it: with the variable unset a point costs one environment lookup.

The points (name, qualifiers, where):

- ``sample``, ``generate-rubrics``, ``verify`` (qualifier: the stage, e.g. ``verify:measure``): in
  ``dr_core.runs.round_steps.sample_sets`` / ``generate_rubric_rows`` / ``verify_sets``, after the step's model work
  and before its rows are returned to the task that writes them (so inside the Prefect step, before its store write);
- ``grpo-step``: ``dr_core.train.trainer``, a trainer callback at the end of every optimiser step, before that step's
  checkpoint is saved (between two checkpoints);
- ``grpo-final``: ``dr_core.train.grpo``, after the last step's checkpoint, before the final model is saved;
- ``serve-batch``: ``dr_core.service.batcher``, after a reward-service batch is scored and before it is written;
- ``store-write`` (qualifiers: the table, e.g. ``store-write:verdicts``, and the part name, e.g.
  ``store-write:measure-verdicts``): ``dr_core.store.atomic._write_temp`` for the store's part files, half-way through
  the
  bytes of the temp file (the first half written and fsynced, the second not yet);
- ``result-write`` (qualifier: the record's key, its file name): ``tasks.result_storage.AtomicLocalFileSystem``, the
  same writer half-way through the temp file of a Prefect task result or cache record under
  ``<store>/_prefect/results`` (local stores; an S3 store writes each record in one PUT).

``DR_FAULT`` holds one or more comma-separated rules ``ACTION@POINT[#N[+]]``:

- ``POINT``: a point's name, or a name with one of its qualifiers after a colon.
- ``#N`` fires on the N-th hit of that point in this process only (1-based: ``kill@grpo-step#2`` is the end of the
  second optimiser step); ``#N+`` fires on the N-th hit and every later one; without ``#`` every hit fires.
- ``ACTION`` is one of
  - ``kill``: ``os.kill(os.getpid(), SIGKILL)``, the process dies at once (no cleanup, no ``finally``);
  - ``enospc``: raise ``OSError(errno.ENOSPC)``, as a full disk does from ``write``;
  - ``pause``: create ``$DR_FAULT_DIR/<POINT>.paused`` (``POINT`` as written in the rule; default directory: the
    current one), then wait until ``<POINT>.continue`` appears there (at most ``$DR_FAULT_PAUSE_S`` seconds,
    default 600), so a test can act at that moment (stop a server, fill a disk) and then let the process go on.

    DR_FAULT=kill@verify dr round ...                      # SIGKILL inside the verify step
    DR_FAULT='enospc@store-write:rubrics' dr round ...     # every write of the rubrics table fails with ENOSPC
    DR_FAULT='kill@store-write:verdicts#1' dr round ...    # SIGKILL half-way through the first verdicts write
    DR_FAULT='pause@verify#1' DR_FAULT_DIR=/tmp/f dr round ...
    DR_FAULT='kill@result-write#2' dr round ...            # SIGKILL half-way through the 2nd Prefect record

Pure: no Prefect, no I/O unless a rule fires. The hit counters are per process. tests/integration/test_faults.py is the
matrix.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import time
from collections import Counter
from pathlib import Path

ENV = "DR_FAULT"
ACTIONS = ("kill", "enospc", "pause")

#: hits of each fault point in this process (a rule's #N counts them)
_hits: Counter = Counter()


def parse(spec: str) -> list[tuple[str, str, int | None, bool]]:
    """``DR_FAULT``'s rules as (action, point, hit number or None, and-later). Raises ValueError on a bad rule."""
    rules = []
    for raw in spec.split(","):
        rule = raw.strip()
        if not rule:
            continue
        action, sep, rest = rule.partition("@")
        if not sep or action not in ACTIONS or not rest:
            raise ValueError(f"{ENV}: bad rule {rule!r}; expected ACTION@POINT[#N[+]] with ACTION in {ACTIONS}")
        point, _, count = rest.partition("#")
        later = count.endswith("+")
        count = count.rstrip("+")
        if count and (not count.isdigit() or int(count) < 1):
            raise ValueError(f"{ENV}: bad hit number in {rule!r}; expected #N or #N+ with N >= 1")
        rules.append((action, point, int(count) if count else None, later))
    return rules


@functools.lru_cache(maxsize=4)
def _rules(spec: str) -> tuple[tuple[str, str, int | None, bool], ...]:
    return tuple(parse(spec))


def fault_point(point: str, *qualifiers: str, file=None, store_path: str | None = None) -> None:
    """A named fault point: act if ``DR_FAULT`` names ``point`` (or ``point:<qualifier>``) for this hit.

    ``file``: an open file the action should flush first (so the bytes written so far are on disk when the
    process dies, as with a real crash after a partial write). ``store_path``: a store part file's path, whose
    table and part name (``store_tags``) become qualifiers (computed only when ``DR_FAULT`` is set)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    if store_path is not None:
        qualifiers = (*qualifiers, *store_tags(store_path))
    names = {point, *(f"{point}:{q}" for q in qualifiers if q)}
    matched = [rule for rule in _rules(spec) if rule[1] in names]
    for target in {rule[1] for rule in matched}:  # one hit per call, however many rules name the point
        _hits[target] += 1
    for action, target, nth, later in matched:
        n = _hits[target]
        if nth is not None and (n < nth if later else n != nth):
            continue
        if file is not None:
            file.flush()
            os.fsync(file.fileno())
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # not reached: SIGKILL cannot be caught
        elif action == "enospc":
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected by {ENV} at {target}, hit {n})")
        else:
            _pause(target)


def _pause(target: str) -> None:
    folder = Path(os.environ.get("DR_FAULT_DIR") or ".")
    name = target.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.paused").write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + float(os.environ.get("DR_FAULT_PAUSE_S", "600"))
    go = folder / f"{name}.continue"
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def store_tags(path: str) -> tuple[str, str]:
    """Qualifiers of a store write: the table (the directory above the partition directories) and the part name,
    from a part file's path ``.../<table>/<key>=<value>/.../<part>.parquet``."""
    parts = Path(path).parts
    i = len(parts) - 2
    while i > 0 and "=" in parts[i]:
        i -= 1
    return parts[i], Path(path).name.removesuffix(".parquet")
