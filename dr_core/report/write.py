"""``write_report``: one run's report from a store -> ``report.html`` and ``report.json`` in a directory, together.

Both files go through the project's one atomic writer (``dr_core.store.atomic.write_all_atomic``): both are written
to temp files before either is renamed into place, so a failure leaves no half-written page or JSON.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from dr_core.report.collect import ReportError, collect, known_runs
from dr_core.report.render import render_html
from dr_core.store import atomic
from dr_core.store.artifacts import SEGMENT_PATTERN, Store
from dr_core.store.atomic import json_text


def write_report(
    store: Store, run_id: str, out_dir: str | Path, n_examples: int = 3, warn: Callable[[str], None] | None = None
) -> Path:
    """Collect ``run_id``'s data from ``store``, write ``out_dir/report.html`` and ``out_dir/report.json`` together
    (atomically: both or neither); return the HTML path. Checked before any query: the run id is valid and in the
    store, ``out_dir`` is (or can be made) a directory. Queries that fail are listed in the page and passed to
    ``warn``; when every query failed, nothing is written and ReportError says why."""
    if not re.match(SEGMENT_PATTERN, run_id or ""):
        raise ReportError(f"--run-id {run_id!r} is not a run id (it must match {SEGMENT_PATTERN})")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file; give a directory (report.html and report.json go inside)")
    for name in ("report.json", "report.html"):
        try:
            atomic.check_output_path(out / name, "report")
        except OSError as exc:
            raise ReportError(str(exc)) from None
    con = store.connect()
    runs = known_runs(con)
    if run_id not in runs:
        raise ReportError(f"no run {run_id!r} in store {store.url}; runs there: {', '.join(runs) or '(none)'}")
    d = collect(con, run_id, n_examples)
    if d["errors"] and len(d["errors"]) >= d["queries"]:
        raise ReportError(
            f"every one of the report's {d['queries']} queries failed on store {store.url} (nothing "
            f"written); first: {d['errors'][0]}"
        )
    for e in d["errors"]:
        if warn:
            warn(f"query {e}")
    atomic.write_all_atomic(
        [(out / "report.json", json_text(d, indent=1, default=str)), (out / "report.html", render_html(d, store.url))]
    )
    return out / "report.html"
