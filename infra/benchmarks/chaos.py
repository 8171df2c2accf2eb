"""The random-kill campaign (issue 29): a two-round ``dr coevolve`` on scripted engines, SIGKILLed at moments drawn
from a seeded generator and resumed, ``--runs`` times (``--twice`` of them killed twice), each compared with an
uninterrupted run: rows lost, rows duplicated, table content hashes, temp files left, whether the cache served the
steps a killed execution had finished, and whether the step log shows each interrupted step. Not in CI (about 45 s a
run on 2 cores); its short version is tests/integration/test_chaos.py. The harness is tests/support/chaos.py.

    .venv/bin/python infra/benchmarks/chaos.py --runs 30 --twice 5 --seed 29
    .venv/bin/python infra/benchmarks/chaos.py --runs 3 --seed 1 --keep /tmp/chaos   # a quick look, files kept

Writes infra/benchmarks/results/chaos.json (every case) and prints a Markdown table (the README's Guarantees
section). Exit status 1 when any case lost, duplicated or left anything, or its cache or step log was wrong.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.chaos import Chaos, draw_kills  # noqa: E402

RESULTS = REPO / "infra" / "benchmarks" / "results" / "chaos.json"


def table(cases: list[dict], reference: dict) -> str:
    lines = [
        "| run | kills at (s) | interrupted step | lost | duplicated | tables equal | left | cache served | step log |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        o = c["outcome"]
        kills = ", ".join(f"{k['at']:.1f}" + ("" if k["killed"] else " (ended first)") for k in o.get("kills", []))
        lines.append(
            f"| {c['name']} | {kills} | {', '.join(o.get('died_in', [])) or '-'} | {o.get('lost', '?')} "
            f"| {o.get('duplicated', '?')} | {'yes' if o.get('tables_equal') else 'NO'} | {len(o.get('left', []))} "
            f"| {o.get('cache', '?')} | {'yes' if o.get('log_ok') else 'NO'} |"
        )
    ok = sum(c["outcome"].get("ok", False) for c in cases)
    killed = sum(k["killed"] for c in cases for k in c["outcome"].get("kills", []))
    lines.append("")
    lines.append(
        f"{ok}/{len(cases)} runs matched the uninterrupted run ({killed} kills struck a running execution); "
        f"{sum(c['outcome'].get('lost', 0) for c in cases)} rows lost, "
        f"{sum(c['outcome'].get('duplicated', 0) for c in cases)} duplicated, "
        f"{sum(len(c['outcome'].get('left', [])) for c in cases)} temp files left. "
        f"Reference: {reference['rows']} rows, {reference['seconds']:.0f} s uninterrupted, "
        f"{reference['rerun_seconds']:.0f} s fully cached."
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="cases (default 30)")
    ap.add_argument("--twice", type=int, default=5, help="cases killed twice (default 5)")
    ap.add_argument("--seed", type=int, default=29, help="seed of the kill times (default 29)")
    ap.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it (default: a temp one)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS.relative_to(REPO)})")
    a = ap.parse_args()

    from dr_core.model import prepare_default_model
    from tests.support.fixtures_grpo import build_tiny_llama
    from tests.support.fixtures_prefect import prefect_server
    from tests.support.scripted_server import ScriptedServer

    root = a.keep or Path(tempfile.mkdtemp(prefix="dr-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        tiny = build_tiny_llama(prepare_default_model(), root / "tiny")
        with ScriptedServer() as scripted, prefect_server(root / "prefect-server") as api:
            engines = root / "engines.json"
            role = {"kind": "openai_http", "base_url": scripted.base_url, "model": "default", "verdict_mode": "choice"}
            engines.write_text(json.dumps({r: role for r in ("generator", "verifier", "policy")}))
            chaos = Chaos(root, engines, api, Path(tiny))
            ref = chaos.make_reference()
            print(f"reference: {ref['rows']} rows in {ref['seconds']} s ({ref['rerun_seconds']} s cached)", flush=True)
            cases = []
            for i, kills in enumerate(draw_kills(a.seed, a.runs, a.twice, ref["seconds"])):
                case = chaos.run_case(f"run-{i + 1:02d}", kills)
                o = case.outcome
                print(
                    f"{case.name}: kills {kills} -> {'ok' if o.get('ok') else 'FAILED'} "
                    f"(lost {o.get('lost')}, dup {o.get('duplicated')}, left {len(o.get('left', []))}, "
                    f"cache {o.get('cache')}, died in {o.get('died_in')}) {o.get('error', '')}",
                    flush=True,
                )
                cases.append({"name": case.name, "kill_times": kills, "outcome": o})
    finally:
        if a.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    report = {
        "command": "infra/benchmarks/chaos.py " + " ".join(sys.argv[1:]),
        "seed": a.seed,
        "runs": a.runs,
        "twice": a.twice,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "reference": {k: v for k, v in ref.items() if k not in ("snapshot",)},
        "cases": cases,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(table(cases, ref))
    return 0 if all(c["outcome"].get("ok") for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
