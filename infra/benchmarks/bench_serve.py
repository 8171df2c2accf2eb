"""Benchmark (not a test): what the reward service's batching buys, and continuous batching against coalescing.
One ``dr serve`` process per batching mode (``--modes``, default ``coalesce,continuous``; the default engines: the
bundled models on in-process vLLM for generator and verifier; a fresh temporary store each; a free port on
127.0.0.1; ``--max-batch-sets 32``), one after the other, and in this one run:

- ``warm-up``: 2 requests to each server, not measured (first engine calls, compiled graphs, caches);
- ``sequential``: N sets (``--requests``) sent one after another by one client to the first server, each waiting for
  its answer (a lone request's latency; both modes run a lone set the same way);
- ``concurrent``: N *other* sets sent by C concurrent clients (``--clients``; one thread and one HTTP connection
  each) to each server in turn, the same sets to every mode. ``coalesce`` (the service before continuous batching)
  gathers concurrent sets into one engine batch and answers them all when it is done; ``continuous`` scores each set
  on its own, the engines batching every set in flight continuously, and answers it when its own checks are done.

A set is a prompt and ``--responses-per-set`` of its candidate responses (evenly spread over their ranking) from
``dr_core/data/anchors_alpacaeval.jsonl`` (48 prompts, 11 ranked responses each). The sets are dealt alternately
to the two phases, so both see the same mix of prompt and response lengths. No ``seed`` is sent (every set has the
service's default seed), so concurrent sets can share one generator call.

Per phase: requests, wall seconds, throughput (sets/s), p50 / p95 client-side latency (s), and the mean sets per
run of the stages (the ``dr_batch_sets_sum`` / ``dr_batch_sets_count`` deltas of ``GET /metrics`` across the phase:
an engine batch in ``coalesce`` mode, always 1 in ``continuous`` mode); then the ratios of each concurrent phase to
the sequential one, and of ``continuous`` to ``coalesce`` (the goal: p50 at most 0.6x, throughput at least 1x). Writes
``infra/benchmarks/results/bench_serve.json`` (``--output``) and prints a markdown table.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_serve.py \\
        [--requests 16] [--clients 16] [--responses-per-set 4] [--modes coalesce,continuous] [--keep-store]

(plain ``OMP_NUM_THREADS=2 python infra/benchmarks/bench_serve.py`` works too; the flock keeps it from sharing
the CPUs with another engine.)
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_harness import (  # noqa: E402
    DATA,
    HTTP_TIMEOUT_S,
    READY_TIMEOUT_S,
    ROOT,
    fmt,
    free_port,
    make_sets,
    percentile,
    read_metrics,
    result_head,
    stop_server,
    wait_ready,
)

DEFAULT_OUTPUT = ROOT / "infra" / "benchmarks" / "results" / "bench_serve.json"
WARMUP = 2


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


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=16, help="sets per measured phase (default 16)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients in the concurrent phase")
    ap.add_argument("--responses-per-set", type=int, default=4)
    ap.add_argument("--modes", default="coalesce,continuous", help="batching modes to measure, one server each")
    ap.add_argument("--max-batch-sets", type=int, default=32)
    ap.add_argument("--keep-store", action="store_true", help="keep the temporary stores (their paths are printed)")
    ap.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = ap.parse_args()
    if args.requests < 1 or args.clients < 1 or args.responses_per_set < 2:
        ap.error("--requests and --clients must be >= 1, --responses-per-set >= 2")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in ("coalesce", "continuous") for m in args.modes):
        ap.error("--modes: a comma-separated list of coalesce, continuous")
    return args


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    n = args.requests
    sets = make_sets(WARMUP + 2 * n, args.responses_per_set)
    warm, rest = sets[:WARMUP], sets[WARMUP:]
    seq_sets, conc_sets = rest[0::2], rest[1::2]  # dealt alternately: the same mix of lengths in both phases
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    phases, servers = {}, {}
    for i, mode in enumerate(args.modes):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        tmp = Path(tempfile.mkdtemp(prefix=f"dr-bench-serve-{mode}-"))
        store, log_path = tmp / "store", tmp / "serve.log"
        cmd = serve_command(store, port, args.max_batch_sets, mode)
        print(f"$ {' '.join(cmd)}   (log: {log_path})", flush=True)
        log_file = open(log_path, "w")
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            ready, ready_s, got = run_phases(
                base, proc, log_path, (warm, seq_sets if i == 0 else [], conc_sets), mode, args.clients
            )
        finally:
            exit_code = stop_server(proc)
            log_file.close()
            if args.keep_store:
                print(f"store kept: {store} (server log: {log_path})")
        phases.update(got)
        servers[mode] = {"ready": ready, "startup_s": round(ready_s, 1), "exit_code": exit_code}
        if not args.keep_store:
            shutil.rmtree(tmp, ignore_errors=True)

    ratios = ratios_of(phases, args.modes)
    total = time.perf_counter() - t0
    print_report(phases, ratios, args.clients, servers, total)
    result = result_of(args, env, servers, phases, ratios, total)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def serve_command(store: Path, port: int, max_batch_sets: int, mode: str) -> list[str]:
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
        "--batching",
        mode,
        "--max-batch-sets",
        str(max_batch_sets),
        "--run-id",
        "bench-serve",
    ]


def run_phases(base: str, proc, log_path: Path, sets: tuple, mode: str, clients: int) -> tuple:
    """Wait for the server, then warm-up, sequential (if given sets) and concurrent, each with the engine batches'
    deltas of ``GET /metrics`` across it. Returns (``/ready``'s answer, seconds until ready, the phases' summaries,
    named ``warmup:MODE``, ``sequential`` and ``concurrent:MODE``)."""
    warm, seq_sets, conc_sets = sets
    phases = {}
    tag = f"b{int(time.time())}-{mode}"
    ready, ready_s = wait_ready(base, proc, log_path, READY_TIMEOUT_S)
    print(f"[{mode}] ready after {ready_s:.1f} s: {ready}", flush=True)
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as mc:
        m0 = read_metrics(mc, base)
        recs, wall = run_sequential(base, warm, f"{tag}-warm")
        m1 = read_metrics(mc, base)
        phases[f"warmup:{mode}"] = summarize(f"warmup:{mode}", recs, wall, batch_delta(m0, m1))
        print(f"[{mode}] warm-up: {len(recs)} requests in {wall:.1f} s", flush=True)

        if seq_sets:
            recs, wall = run_sequential(base, seq_sets, f"{tag}-seq")
            m2 = read_metrics(mc, base)
            phases["sequential"] = summarize("sequential", recs, wall, batch_delta(m1, m2))
            print(f"[{mode}] sequential: {len(recs)} requests in {wall:.1f} s", flush=True)
            m1 = m2

        recs, wall = run_concurrent(base, conc_sets, f"{tag}-conc", clients)
        m3 = read_metrics(mc, base)
        phases[f"concurrent:{mode}"] = summarize(f"concurrent:{mode}", recs, wall, batch_delta(m1, m3))
        print(f"[{mode}] concurrent ({clients} clients): {len(recs)} requests in {wall:.1f} s", flush=True)
    return ready, ready_s, phases


def ratios_of(phases: dict, modes: list[str]) -> dict:
    def ratio(a: str, b: str, key: str) -> float | None:
        x, y = phases.get(a, {}).get(key), phases.get(b, {}).get(key)
        return round(x / y, 3) if x is not None and y else None

    out = {}
    for mode in modes:
        out[f"throughput_{mode}_over_sequential"] = ratio(f"concurrent:{mode}", "sequential", "throughput_sets_per_s")
        out[f"p50_latency_{mode}_over_sequential"] = ratio(f"concurrent:{mode}", "sequential", "latency_p50_s")
    if {"coalesce", "continuous"} <= set(modes):
        out["throughput_continuous_over_coalesce"] = ratio(
            "concurrent:continuous", "concurrent:coalesce", "throughput_sets_per_s"
        )
        out["p50_latency_continuous_over_coalesce"] = ratio(
            "concurrent:continuous", "concurrent:coalesce", "latency_p50_s"
        )
        out["p95_latency_continuous_over_coalesce"] = ratio(
            "concurrent:continuous", "concurrent:coalesce", "latency_p95_s"
        )
    return out


def print_report(phases: dict, ratios: dict, clients: int, servers: dict, total: float) -> None:
    """The markdown table of the measured phases, the ratios, the stage seconds and the first errors."""
    rows = [("phase", "requests", "ok", "wall s", "sets/s", "p50 s", "p95 s", "stage runs", "mean sets/run")]
    measured = [k for k in phases if not k.startswith("warmup")]
    for name in measured:
        p = phases[name]
        label = name if name == "sequential" else f"{name} ({clients} clients)"
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
    print()
    for key, value in ratios.items():
        print(f"{key}: x{fmt(value, '.2f')}")
    if "p50_latency_continuous_over_coalesce" in ratios:
        p50, thr = ratios["p50_latency_continuous_over_coalesce"], ratios["throughput_continuous_over_coalesce"]
        met = p50 is not None and thr is not None and p50 <= 0.6 and thr >= 1.0
        print(f"goal (p50 <= 0.6x and throughput >= 1x of coalesce): {'met' if met else 'NOT met'}")
    for name in measured:
        st = phases[name]["stage_seconds"]
        print(
            f"{name}: generation {st['generation']:.1f} s, verification {st['verification']:.1f} s, "
            f"store {st['store']:.1f} s (summed over the sets' stage runs)"
        )
    for mode, srv in servers.items():
        print(f"[{mode}] engine start-up {srv['startup_s']:.1f} s; server exit code {srv['exit_code']}")
    print(f"total wall {total:.1f} s")
    for name, p in phases.items():
        for e in p["errors"][:3]:
            print(f"  {name} error: {e['request_id']} status {e['status']}: {e['error'][:300]}")


def result_of(args, env: dict, servers: dict, phases: dict, ratios: dict, total: float) -> dict:
    config = {
        "requests": args.requests,
        "clients": args.clients,
        "responses_per_set": args.responses_per_set,
        "modes": args.modes,
        "max_batch_sets": args.max_batch_sets,
        "warmup_requests": WARMUP,
        "data": str(DATA.relative_to(ROOT)),
        "engines": "dr serve's default (--preset tiny), vLLM CPU",
        "omp_num_threads": env["OMP_NUM_THREADS"],
    }
    return {
        **result_head("bench_serve", config),
        "servers": servers,
        "phases": phases,
        "ratios": ratios,
        "total_wall_s": round(total, 1),
    }


if __name__ == "__main__":
    main()
