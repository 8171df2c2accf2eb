"""The rows of a tiny round, as one fingerprint per table, and whether its re-run is served from the cache.

A check for refactors of the orchestration (flows/, tasks/): run it before and after a change and compare. It runs
``dr round`` on the scripted OpenAI-compatible server (tests/support/scripted_server.py: answers are a function of the
request, so equal work stores equal rows), unsharded and with ``--shards 2``, each twice into its own store, and
prints per table the row count and a SHA-256 of the sorted rows (clock, code and config columns left out), and the
state of every step of the re-run. Seconds, no model.

    .venv/bin/python infra/benchmarks/round_fingerprint.py --out /tmp/after.json
    .venv/bin/python infra/benchmarks/round_fingerprint.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUND_SET = ["--set", "n_prompts=3", "--set", "k=3", "--set", "n_anchor=3", "--set", "eval_limit=2"]
#: Columns that differ between two executions of the same work: the clock, the code and config records.
VOLATILE = {"runs": {"created_at", "config_json", "code_version"}}
#: Logs of executions (timings), not results of the work.
NOT_COMPARED = {"steps"}


def _value(v):
    """A column value as compared: times as text, and the scripted server's port (a new one per run, part of the
    model identity ``http://127.0.0.1:PORT/v1#default``) as ``PORT``."""
    v = v.isoformat() if hasattr(v, "isoformat") else v
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", v) if isinstance(v, str) else v


def fingerprint(store_url: str) -> dict[str, dict]:
    """Per table: row count and SHA-256 of its rows, sorted (volatile columns left out)."""
    from dr_core.store.artifacts import Store
    from dr_core.store.schemas import TABLES

    st = Store.from_url(store_url)
    out = {}
    for name in sorted(TABLES):
        if name in NOT_COMPARED:
            continue
        drop = VOLATILE.get(name, set())
        rows = sorted(
            repr(sorted((k, _value(v)) for k, v in r.items() if k not in drop)) for r in st.read_table(name).to_pylist()
        )
        out[name] = {"rows": len(rows), "sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]}
    return out


def dr_round(base_url: str, work: Path, store: Path, out: Path, *extra: str) -> dict:
    engines = work / "engines.json"
    role = {"kind": "openai_http", "base_url": base_url, "model": "default", "verdict_mode": "choice"}
    engines.write_text(json.dumps({r: role for r in ("generator", "verifier", "policy")}))
    env = dict(os.environ, DR_CACHE_DIR=str(work / "cache"), PREFECT_HOME=str(work / "prefect"), OMP_NUM_THREADS="1")
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "cli.main", "round", "--store", str(store), "--run-id", "fp", *ROUND_SET]
    cmd += ["--engines", str(engines), "--json", str(out), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"dr round failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="write the fingerprints here (JSON)")
    ap.add_argument("--compare", type=Path, help="a fingerprint file of another tree: exit 1 if the rows differ")
    ap.add_argument("--keep", type=Path, help="keep the stores under this directory (default: a temporary one)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.support.scripted_server import ScriptedServer

    result = {}
    with ScriptedServer() as srv, tempfile.TemporaryDirectory(prefix="dr-fp-") as scratch:
        tmp = args.keep or scratch
        for label, extra in (("unsharded", []), ("shards-2", ["--shards", "2"])):
            work = Path(tmp) / label
            work.mkdir(parents=True)
            store = work / "store"
            dr_round(srv.base_url, work, store, work / "first.json", *extra)
            again = dr_round(srv.base_url, work, store, work / "again.json", *extra)
            result[label] = {
                "tables": fingerprint(str(store)),
                "rerun_states": {k: v["state"] for k, v in again["steps"].items()},
            }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for label, r in result.items():
        print(f"== {label}")
        for t, f in r["tables"].items():
            print(f"  {t:<12}{f['rows']:>6} rows  {f['sha256']}")
        print("  re-run:", ", ".join(f"{k}={v}" for k, v in r["rerun_states"].items()))
    same = result["unsharded"]["tables"] == result["shards-2"]["tables"]
    print("sharded rows equal unsharded rows:", same)
    if args.compare:
        before = json.loads(args.compare.read_text())
        diff = [
            f"{label}/{t}"
            for label in result
            for t in result[label]["tables"]
            if before.get(label, {}).get("tables", {}).get(t) != result[label]["tables"][t]
        ]
        print("rows equal to", args.compare, ":", not diff, diff or "")
        sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
