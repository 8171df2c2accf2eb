"""Benchmark (not a test): what the reward service's batcher buys. One ``dr serve`` process (the default engines:
the bundled model on in-process vLLM for generator and verifier; a fresh temporary store; a free port on
127.0.0.1; ``--max-batch-sets 32``), then, in this one run and against that one process:

- ``warm-up``: 2 requests, not measured (first engine calls, compiled graphs, caches);
- ``sequential``: N sets (``--requests``) sent one after another by one client, each waiting for its answer;
- ``concurrent``: N *other* sets (new request ids, so nothing is replayed from the service's ledger) sent by C
  concurrent clients (``--clients``; one thread and one HTTP connection each), which the service's batcher
  coalesces into engine batches.

A set is a prompt and ``--responses-per-set`` of its candidate responses (evenly spread over their ranking) from
``dr_core/data/anchors_alpacaeval.jsonl`` (48 prompts, 11 ranked responses each). The sets are dealt alternately
to the two phases, so both see the same mix of prompt and response lengths. No ``seed`` is sent (every set has the
service's default seed), so concurrent sets can share one generator call.

Per phase: requests, wall seconds, throughput (sets/s), p50 / p95 client-side latency (s), and the mean sets per
engine batch (the ``dr_batch_sets_sum`` / ``dr_batch_sets_count`` deltas of ``GET /metrics`` across the phase);
then the ratios concurrent / sequential of throughput and p50 latency. Writes
``infra/benchmarks/results/bench_serve.json`` (``--output``) and prints a markdown table.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_serve.py \\
        [--requests 16] [--clients 16] [--responses-per-set 4] [--port PORT] [--keep-store]

(plain ``OMP_NUM_THREADS=2 python infra/benchmarks/bench_serve.py`` works too; the flock keeps it from sharing
the CPUs with another engine.)
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "dr_core" / "data" / "anchors_alpacaeval.jsonl"
DEFAULT_OUTPUT = ROOT / "infra" / "benchmarks" / "results" / "bench_serve.json"
HTTP_TIMEOUT_S = 600.0
READY_TIMEOUT_S = 1200.0
STOP_GRACE_S = 30.0
WARMUP = 2


# -- data -------------------------------------------------------------------------------------------------------
def make_sets(n: int, k: int) -> list[dict]:
    """n distinct sets (prompt + k responses): each prompt once with k responses spread over its ranking, then
    again with the next spread (shifted by one) if more sets are needed."""
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    sets, shift = [], 0
    while len(sets) < n:
        added = False
        for row in rows:
            resp = row["responses"]
            if len(resp) < k:
                continue
            step = (len(resp) - 1) / (k - 1) if k > 1 else 0
            idx = sorted({(round(i * step) + shift) % len(resp) for i in range(k)})
            if len(idx) < k:
                continue
            sets.append(
                {
                    "source_id": row["id"],
                    "prompt": row["prompt"],
                    "responses": [resp[i] for i in idx],
                    "response_indices": idx,
                }
            )
            added = True
            if len(sets) == n:
                break
        if not added or shift > 64:
            sys.exit(f"{DATA.name}: cannot make {n} distinct sets of {k} responses")
        shift += 1
    return sets


# -- the server -------------------------------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_ready(base: str, proc: subprocess.Popen, log_path: Path, timeout: float) -> tuple[dict, float]:
    start = time.perf_counter()
    with httpx.Client(timeout=10.0) as client:
        while True:
            if proc.poll() is not None:
                sys.exit(f"dr serve exited with code {proc.returncode} before it was ready:\n{tail(log_path)}")
            try:
                r = client.get(f"{base}/ready")
                if r.status_code == 200:
                    return r.json(), time.perf_counter() - start
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                if "failed to start" in str(body.get("detail", "")):
                    sys.exit(f"dr serve failed to start: {body}\n{tail(log_path)}")
            except httpx.TransportError:
                pass
            if time.perf_counter() - start > timeout:
                sys.exit(f"dr serve not ready after {timeout:.0f} s:\n{tail(log_path)}")
            time.sleep(1.0)


def stop_server(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            print(
                f"dr serve (pid {proc.pid}) still running {STOP_GRACE_S:.0f} s after SIGTERM: SIGKILL", file=sys.stderr
            )
            proc.kill()
            proc.wait()
    return proc.returncode


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# -- metrics ----------------------------------------------------------------------------------------------------
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def read_metrics(client: httpx.Client, base: str) -> dict[str, float]:
    """Series -> value, summed over labels (e.g. dr_batches_total over every outcome)."""
    r = client.get(f"{base}/metrics", timeout=HTTP_TIMEOUT_S)
    r.raise_for_status()
    out: dict[str, float] = {}
    for line in r.text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and not line.startswith("#"):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            stage = re.search(r'stage="([a-z]+)"', m.group(2) or "")
            if stage and m.group(1) == "dr_stage_seconds_total":  # also per stage
                key = f"{m.group(1)}:{stage.group(1)}"
                out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def batch_delta(before: dict, after: dict) -> dict:
    sets = after.get("dr_batch_sets_sum", 0.0) - before.get("dr_batch_sets_sum", 0.0)
    batches = after.get("dr_batch_sets_count", 0.0) - before.get("dr_batch_sets_count", 0.0)
    return {
        "engine_batches": int(batches),
        "batched_sets": int(sets),
        "mean_sets_per_batch": round(sets / batches, 2) if batches else None,
        "batches_total_delta": int(after.get("dr_batches_total", 0.0) - before.get("dr_batches_total", 0.0)),
        "stage_seconds": {
            st: round(
                after.get(f"dr_stage_seconds_total:{st}", 0.0) - before.get(f"dr_stage_seconds_total:{st}", 0.0), 2
            )
            for st in ("generation", "verification", "store")
        },
    }


# -- clients ----------------------------------------------------------------------------------------------------
def body_of(s: dict, rid: str) -> dict:
    return {"prompt": s["prompt"], "responses": s["responses"], "request_id": rid}


def post(client: httpx.Client, base: str, s: dict, rid: str) -> dict:
    start = time.perf_counter()
    try:
        r = client.post(f"{base}/v1/score-set", json=body_of(s, rid), timeout=HTTP_TIMEOUT_S)
        status, text = r.status_code, r.text
    except httpx.HTTPError as exc:
        status, text = None, f"{type(exc).__name__}: {exc}"
    latency = time.perf_counter() - start
    rec = {"request_id": rid, "source_id": s["source_id"], "status": status, "latency_s": latency}
    if status == 200:
        ans = json.loads(text)
        rec["scores"] = ans.get("scores")
        rec["unscorable"] = sum(x is None for x in ans.get("scores") or [])
    else:
        rec["error"] = text[:2000]
    return rec


def run_sequential(base: str, sets: list[dict], prefix: str) -> tuple[list[dict], float]:
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        start = time.perf_counter()
        recs = [post(client, base, s, f"{prefix}-{i}") for i, s in enumerate(sets)]
        return recs, time.perf_counter() - start


def run_concurrent(base: str, sets: list[dict], prefix: str, clients: int) -> tuple[list[dict], float]:
    """``clients`` threads, one httpx.Client (connection) each, pulling sets from one queue; all start together."""
    work: queue.Queue = queue.Queue()
    for i, s in enumerate(sets):
        work.put((i, s))
    recs: list[dict | None] = [None] * len(sets)
    go = threading.Barrier(clients + 1)

    def worker():
        with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
            go.wait()
            while True:
                try:
                    i, s = work.get_nowait()
                except queue.Empty:
                    return
                recs[i] = post(client, base, s, f"{prefix}-{i}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    go.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return [r for r in recs if r is not None], time.perf_counter() - start


def percentile(xs: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not xs:
        return None
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(name: str, recs: list[dict], wall: float, batches: dict) -> dict:
    ok = [r for r in recs if r["status"] == 200]
    lat = [r["latency_s"] for r in ok]
    return {
        "mode": name,
        "requests": len(recs),
        "ok": len(ok),
        "failed": len(recs) - len(ok),
        "wall_s": round(wall, 2),
        "throughput_sets_per_s": round(len(ok) / wall, 4) if wall > 0 else None,
        "latency_p50_s": round(percentile(lat, 0.5), 2) if lat else None,
        "latency_p95_s": round(percentile(lat, 0.95), 2) if lat else None,
        "latency_mean_s": round(sum(lat) / len(lat), 2) if lat else None,
        "unscorable_responses": sum(r.get("unscorable", 0) for r in ok),
        **batches,
        "errors": [
            {"request_id": r["request_id"], "status": r["status"], "error": r["error"][:500]}
            for r in recs
            if r["status"] != 200
        ],
    }


def fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=16, help="sets per measured phase (default 16)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients in the concurrent phase")
    ap.add_argument("--responses-per-set", type=int, default=4)
    ap.add_argument("--port", type=int, default=None, help="default: a free port on 127.0.0.1")
    ap.add_argument("--max-batch-sets", type=int, default=32)
    ap.add_argument("--keep-store", action="store_true", help="keep the temporary store (its path is printed)")
    ap.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = ap.parse_args()
    if args.requests < 1 or args.clients < 1 or args.responses_per_set < 2:
        ap.error("--requests and --clients must be >= 1, --responses-per-set >= 2")
    return args


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    n = args.requests
    sets = make_sets(WARMUP + 2 * n, args.responses_per_set)
    warm, rest = sets[:WARMUP], sets[WARMUP:]
    seq_sets, conc_sets = rest[0::2], rest[1::2]  # dealt alternately: the same mix of lengths in both phases

    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="dr-bench-serve-"))
    store, log_path = tmp / "store", tmp / "serve.log"
    run_tag = f"b{int(time.time())}"
    cmd = serve_command(store, port, args.max_batch_sets)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    print(f"$ {' '.join(cmd)}   (log: {log_path})", flush=True)
    log_file = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready, ready_s, phases = run_phases(base, proc, log_path, (warm, seq_sets, conc_sets), run_tag, args.clients)
    finally:
        exit_code = stop_server(proc)
        log_file.close()
        if args.keep_store:
            print(f"store kept: {store} (server log: {log_path})")

    ratios = ratios_of(phases)
    total = time.perf_counter() - t0
    print_report(phases, ratios, args.clients, ready_s, total, exit_code)
    result = result_of(args, env, ready, ready_s, exit_code, phases, ratios, total)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    if not args.keep_store:
        shutil.rmtree(tmp, ignore_errors=True)


def serve_command(store: Path, port: int, max_batch_sets: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cli.main",
        "serve",
        "--store",
        str(store),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-batch-sets",
        str(max_batch_sets),
        "--run-id",
        "bench-serve",
    ]


def run_phases(base: str, proc, log_path: Path, sets: tuple, run_tag: str, clients: int) -> tuple:
    """Wait for the server, then warm-up, sequential and concurrent, each with the engine batches' deltas of
    ``GET /metrics`` across it. Returns (``/ready``'s answer, seconds until ready, the phases' summaries)."""
    warm, seq_sets, conc_sets = sets
    phases = {}
    ready, ready_s = wait_ready(base, proc, log_path, READY_TIMEOUT_S)
    print(f"ready after {ready_s:.1f} s: {ready}", flush=True)
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as mc:
        m0 = read_metrics(mc, base)
        recs, wall = run_sequential(base, warm, f"{run_tag}-warm")
        m1 = read_metrics(mc, base)
        phases["warmup"] = summarize("warmup", recs, wall, batch_delta(m0, m1))
        print(f"warm-up: {len(recs)} requests in {wall:.1f} s", flush=True)

        recs, wall = run_sequential(base, seq_sets, f"{run_tag}-seq")
        m2 = read_metrics(mc, base)
        phases["sequential"] = summarize("sequential", recs, wall, batch_delta(m1, m2))
        print(f"sequential: {len(recs)} requests in {wall:.1f} s", flush=True)

        recs, wall = run_concurrent(base, conc_sets, f"{run_tag}-conc", clients)
        m3 = read_metrics(mc, base)
        phases["concurrent"] = summarize("concurrent", recs, wall, batch_delta(m2, m3))
        print(f"concurrent ({clients} clients): {len(recs)} requests in {wall:.1f} s", flush=True)
    return ready, ready_s, phases


def ratios_of(phases: dict) -> dict:
    seq, conc = phases["sequential"], phases["concurrent"]

    def ratio(key: str) -> float | None:
        a, b = conc.get(key), seq.get(key)
        return round(a / b, 3) if a is not None and b else None

    return {
        "throughput_concurrent_over_sequential": ratio("throughput_sets_per_s"),
        "p50_latency_concurrent_over_sequential": ratio("latency_p50_s"),
    }


def print_report(phases: dict, ratios: dict, clients: int, ready_s: float, total: float, exit_code) -> None:
    """The markdown table of the two measured phases, the ratios, the stage seconds and the first errors."""
    rows = [("mode", "requests", "ok", "wall s", "sets/s", "p50 s", "p95 s", "batches", "mean sets/batch")]
    for name in ("sequential", "concurrent"):
        p = phases[name]
        label = name if name == "sequential" else f"concurrent ({clients} clients)"
        rows.append(
            (
                label,
                str(p["requests"]),
                str(p["ok"]),
                fmt(p["wall_s"], ".1f"),
                fmt(p["throughput_sets_per_s"], ".3f"),
                fmt(p["latency_p50_s"], ".1f"),
                fmt(p["latency_p95_s"], ".1f"),
                str(p["engine_batches"]),
                fmt(p["mean_sets_per_batch"], ".2f"),
            )
        )
    print()
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "|".join("---" for _ in rows[0]) + "|")
    for r in rows[1:]:
        print("| " + " | ".join(r) + " |")
    print(
        f"\nconcurrent / sequential: throughput x{fmt(ratios['throughput_concurrent_over_sequential'], '.2f')}, "
        f"p50 latency x{fmt(ratios['p50_latency_concurrent_over_sequential'], '.2f')}"
    )
    for name in ("sequential", "concurrent"):
        st = phases[name]["stage_seconds"]
        print(
            f"{name}: generation {st['generation']:.1f} s, verification {st['verification']:.1f} s, "
            f"store {st['store']:.1f} s (inside the engine batches)"
        )
    print(f"engine start-up {ready_s:.1f} s; total wall {total:.1f} s; server exit code {exit_code}")
    for name, p in phases.items():
        for e in p["errors"][:3]:
            print(f"  {name} error: {e['request_id']} status {e['status']}: {e['error'][:300]}")


def result_of(args, env: dict, ready, ready_s: float, exit_code, phases: dict, ratios: dict, total: float) -> dict:
    return {
        "benchmark": "bench_serve",
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "config": {
            "requests": args.requests,
            "clients": args.clients,
            "responses_per_set": args.responses_per_set,
            "max_batch_sets": args.max_batch_sets,
            "warmup_requests": WARMUP,
            "data": str(DATA.relative_to(ROOT)),
            "engines": "dr serve's default (--preset tiny), vLLM CPU",
            "omp_num_threads": env["OMP_NUM_THREADS"],
        },
        "server": ready,
        "startup_s": round(ready_s, 1),
        "server_exit_code": exit_code,
        "phases": phases,
        "ratios": ratios,
        "total_wall_s": round(total, 1),
    }


if __name__ == "__main__":
    main()
