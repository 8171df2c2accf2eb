"""Benchmark (not a test): a soak of the reward service. One ``dr serve`` process (the default engines: the bundled
model on in-process vLLM for generator and verifier, or ``--engines FILE``; a fresh temporary store; a free port on
127.0.0.1; ``--group-size 4``) takes mixed traffic from C clients (``--clients``, a fixed concurrency: one thread
each, closed loop) for ``--minutes`` (20). Each client picks, by a seeded RNG, one of:

- ``score-set``: ``POST /v1/score-set``, a prompt and 4 of its ranked responses (one set);
- ``rewards``: a group of ``POST /v1/rewards``, its 4 members sent at once from 4 threads, so the group fills (one
  set; a new group id each time);
- ``get_reward``: ``POST /get_reward``, an OpenRLHF batch of 4 queries of one prompt (one group, one set);
- ``probe``: ``GET /health`` or ``GET /metrics``;
- ``grpo``: a GRPO-like step, a group of ``POST /v1/rewards`` as ``rewards`` does, for one of ``GRPO_PROMPTS``
  training prompts whose responses repeat across steps as at low temperature: the steps cycle through
  ``GRPO_VARIANTS`` response sets of each prompt (the first as drawn, the others with one response swapped), so
  after one pass the same set comes back under a new group id and its verdicts come from the verdict cache;
- ``replay``: a request answered before, sent again whole (``/v1/score-set`` or one ``/v1/rewards`` member): it
  must get the same answer and write no new rows; counted apart.

The ``score-set``, ``rewards`` and ``get_reward`` sets are fresh: each is sent once (``serve_harness.fresh_sets``,
every 4 of a prompt's 11 responses in ``dr_core/data/anchors_alpacaeval.jsonl``, shuffled by the seed): a pool
of sets that all repeat would be cached one by one and the latency would fall all soak long. The cache still hits
on them where a (prompt, response, criterion) check comes back (the sets share responses), so it keeps warming
slowly; a warm-up of ``--warmup-minutes`` covers the GRPO steps' first pass. Every request id and group id is new:
nothing but the replays is replayed from the service's ledger. Clients start no new request after ``--minutes``;
the requests in flight then finish (the "drain", outside the windows).

Per ``--window-minutes`` window (2), by the time a request was answered: requests answered per route, sets answered
and throughput (sets/s), p50 / p95 latency of the scoring requests (each ``/v1/rewards`` member and each batch is
one request; replays and probes apart), errors (any non-200, transport errors, a replay answered differently) by
status, and the resident memory (RSS, summed over the ``dr serve`` process and its children, sampled every
``--rss-interval`` s). The first window is warm-up (``--warmup-minutes``): the memory baseline is the RSS at its
end, and its p95 is left out of the flatness. After the drain the server is stopped (SIGTERM) and the store's rows
(run id ``bench-soak``, stage ``service``) are counted against the answers: ``requests`` one row per answered
request (a ``/v1/score-set``, a ``/v1/rewards`` member, a ``/get_reward`` query; none for a replay), ``samples``
and ``scores`` one per response of an answered set (per rubric rollout for ``scores``), ``rewards`` one per set
(and rollout), and for the ``/v1/score-set`` sets, whose answers carry the rubric and verdict matrix, ``rubrics``
one per rubric item (one error row for a rollout with no rubric) and ``verdicts`` one per response and item.

The verdict cache over the whole soak (``dr_verdict_cache_*`` from ``/metrics``): hits, misses, hit rate, and the
time saved estimated as hits times the verification seconds per verdict asked. ``p95_noise``: the windows' p95
ratio that chance alone gives, and the p95 of each half; ``latencies``: every answered request's (t_end, latency,
op).

Goals (issue 41): 0 errors, p95 flat within 20 % (max / min of the post-warm-up windows' p95 <= 1.2), RSS growth
at most 10 % after warm-up, rows equal to answers. Each goal is printed met or MISSED; the exit code is 0 either way
(non-zero only when the server does not start). Writes ``infra/benchmarks/results/bench_soak.json``
(``--output``) and prints markdown tables.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_soak.py \\
        [--minutes 20] [--window-minutes 2] [--clients 2] [--warmup-minutes M] [--engines FILE] [--batching MODE] \\
        [--port PORT] [--output FILE] [--keep-store]

(with ``--engines`` pointing at a scripted or remote OpenAI-compatible server no model loads here, and the flock is
not needed; e.g. ``python -m tests.support.scripted_server`` and ``tests/support/serve_proc.py``'s
``engines_file``.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_main_job import TreeRSS  # noqa: E402
from serve_harness import (  # noqa: E402
    DATA,
    GRPO_PROMPTS,
    GRPO_VARIANTS,
    HTTP_TIMEOUT_S,
    READY_TIMEOUT_S,
    free_port,
    fresh_sets,
    grpo_sets,
    make_sets,
    read_metrics,
    result_head,
    stop_server,
    tail,
    wait_ready,
)
from soak_report import (  # noqa: E402
    ROLLOUTS,
    cache_stats,
    count_rows,
    goals,
    memory_growth,
    p95_flatness,
    p95_noise,
    print_report,
    set_answer_rows,
    totals,
    window_stats,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = ROOT / "infra" / "benchmarks" / "results" / "bench_soak.json"
RUN_ID = "bench-soak"
GROUP_SIZE = 4  # responses per set, /v1/rewards group_size and dr serve --group-size
N_SETS = 96  # the pool the GRPO sets are drawn from (serve_harness.grpo_sets)
#: each client's pick per step (weights); replays fall back to a score-set until something was answered
MIX = {"score-set": 0.30, "rewards": 0.20, "get_reward": 0.15, "grpo": 0.20, "probe": 0.10, "replay": 0.05}
ERROR_BACKOFF_S = 1.0  # a client pauses after an error (a dead server is not hammered)


# -- traffic -------------------------------------------------------------------------------------------------------
class Soak:
    """The shared state of the clients: the records, what was answered (for replays and the row accounting)."""

    def __init__(self, base: str, sets: list[dict], run_tag: str, seed: int, duration_s: float, proc):
        self.base, self.run_tag, self.seed, self.proc = base, run_tag, seed, proc
        self.duration_s = duration_s
        self.t0 = self.t0_wall = 0.0
        self.lock = threading.Lock()
        self.records: list[dict] = []
        self.answered: list[dict] = []  # one per set answered: see expected_rows
        self.replayable: list[tuple[str, dict, dict]] = []  # (route, body, answer)
        self.get_reward_sent: dict[str, dict | None] = {}  # body -> its first answer (None until answered)
        self.grpo_sets = grpo_sets(sets)
        self.fresh = fresh_sets(GROUP_SIZE, seed, exclude=self.grpo_sets)
        self.sent = {"fresh": 0, "grpo": 0}  # sets taken so far: the next fresh one, the GRPO cycle's position
        self.server_died: str | None = None

    def next_set(self, kind: str) -> dict:
        """The next fresh set (each once; the list wraps only past its 15,840) or the GRPO cycle's next set."""
        pool = self.fresh if kind == "fresh" else self.grpo_sets
        with self.lock:
            self.sent[kind] += 1
            return pool[(self.sent[kind] - 1) % len(pool)]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def done(self) -> bool:
        if self.proc.poll() is not None and self.server_died is None:
            self.server_died = f"dr serve exited with code {self.proc.returncode} during the soak"
        return self.now() >= self.duration_s or self.server_died is not None

    # -- one request ---------------------------------------------------------------------------------------------
    def call(
        self, http: httpx.Client, op: str, method: str, route: str, body: dict | None = None
    ) -> tuple[dict, object]:
        """One request: its record (``error`` None when answered 200) and the parsed answer (None if not 200)."""
        start = time.monotonic()
        answer, status, error = None, None, None
        try:
            r = http.request(method, f"{self.base}{route}", json=body, timeout=HTTP_TIMEOUT_S)
            status = r.status_code
            if status == 200:
                answer = r.json() if route != "/metrics" else r.text
            else:
                error = r.text[:500]
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        end = time.monotonic()
        rec = {"op": op, "route": route, "t_end": end - self.t0, "latency_s": end - start, "status": status}
        rec.update(error=error, sets=0)
        return rec, answer

    # -- the ops -------------------------------------------------------------------------------------------------
    def score_set(self, http, s: dict, rid: str) -> list[dict]:
        body = {"prompt": s["prompt"], "responses": s["responses"], "request_id": rid}
        rec, ans = self.call(http, "score-set", "POST", "/v1/score-set", body)
        if rec["error"] is None:
            rec["sets"] = 1
            with self.lock:
                self.answered.append(
                    {
                        "op": "score-set",
                        "members": 1,
                        "responses": len(s["responses"]),
                        "set_id": ans.get("set_id"),
                        "answer_rows": set_answer_rows(ans),
                    }
                )
                self.replayable.append(("/v1/score-set", body, ans))
        return [rec]

    def rewards(self, http, pool: ThreadPoolExecutor, s: dict, gid: str) -> list[dict]:
        bodies = [
            {
                "group_id": gid,
                "group_size": GROUP_SIZE,
                "prompt": s["prompt"],
                "response": resp,
                "request_id": f"{gid}-m{k}",
            }
            for k, resp in enumerate(s["responses"][:GROUP_SIZE])
        ]
        results = list(pool.map(lambda b: self.call(http, "rewards", "POST", "/v1/rewards", b), bodies))
        for rec, _ in results:
            rec["unit"] = gid  # one group: one unit of p95_noise
        ok = [(rec, ans, b) for (rec, ans), b in zip(results, bodies) if rec["error"] is None]
        if ok:
            max((rec for rec, _, _ in ok), key=lambda r: r["t_end"])["sets"] = 1  # the set, when its last answer came
            with self.lock:
                self.answered.append(
                    {
                        "op": "rewards",
                        "members": len(ok),
                        "responses": len(bodies),
                        "set_id": ok[0][1].get("set_id"),
                        "answer_rows": None,
                    }
                )
                self.replayable.extend(("/v1/rewards", b, ans) for _, ans, b in ok)
        return [rec for rec, _ in results]

    def get_reward(self, http, s: dict) -> list[dict]:
        responses = s["responses"][:GROUP_SIZE]
        body = {
            "query": [s["prompt"] + r for r in responses],
            "prompts": [s["prompt"]] * len(responses),
            "labels": [""] * len(responses),
        }
        key = json.dumps(body, sort_keys=True)
        with self.lock:
            again = key in self.get_reward_sent
            self.get_reward_sent.setdefault(key, None)
        rec, ans = self.call(http, "replay" if again else "get_reward", "POST", "/get_reward", body)
        if rec["error"] is None:
            if len(ans.get("rewards") or []) != len(responses):
                rec["error"] = f"{len(ans.get('rewards') or [])} rewards for {len(responses)} queries"
            with self.lock:
                first = self.get_reward_sent[key]
                if first is None:
                    self.get_reward_sent[key] = ans
                elif ans != first:
                    rec["error"] = "replay_mismatch"
                if not again:
                    rec["sets"] = 1
                    self.answered.append(
                        {"op": "get_reward", "members": len(responses), "responses": len(responses)}
                        | {"set_id": None, "answer_rows": None}
                    )
        return [rec]

    def replay(self, http, rng: random.Random) -> list[dict] | None:
        with self.lock:
            if not self.replayable:
                return None
            route, body, first = self.replayable[rng.randrange(len(self.replayable))]
        rec, ans = self.call(http, "replay", "POST", route, body)
        if rec["error"] is None and ans != first:
            rec["error"] = "replay_mismatch"
        return [rec]

    # -- a client --------------------------------------------------------------------------------------------------
    def client(self, cid: int, go: threading.Barrier) -> None:
        rng = random.Random(self.seed * 1_000_003 + cid)
        ops, weights = list(MIX), list(MIX.values())
        n = 0
        with httpx.Client(timeout=HTTP_TIMEOUT_S) as http, ThreadPoolExecutor(GROUP_SIZE) as pool:
            go.wait()
            while not self.done():
                n += 1
                op = rng.choices(ops, weights)[0]
                tag = f"{self.run_tag}-c{cid}-{n}"
                recs = self.replay(http, rng) if op == "replay" else None
                if recs is None and op == "replay":
                    op = "score-set"
                s = self.next_set("fresh") if op in ("score-set", "rewards", "get_reward") else None
                if op == "score-set":
                    recs = self.score_set(http, s, tag)
                elif op == "rewards":
                    recs = self.rewards(http, pool, s, f"{tag}-g")
                elif op == "get_reward":
                    recs = self.get_reward(http, s)
                elif op == "grpo":
                    recs = self.rewards(http, pool, self.next_set("grpo"), f"{tag}-g")
                elif op == "probe":
                    route = rng.choice(("/health", "/metrics"))
                    recs = [self.call(http, route.lstrip("/"), "GET", route)[0]]
                with self.lock:
                    self.records.extend(recs)
                if any(r["error"] is not None for r in recs):
                    time.sleep(ERROR_BACKOFF_S)

    def _start_clock(self) -> None:
        self.t0, self.t0_wall = time.monotonic(), time.time()

    def run(self, clients: int) -> float:
        """All clients until ``duration_s``, then the drain; returns the wall seconds of both."""
        go = threading.Barrier(clients + 1, action=self._start_clock)  # the clock starts before any client does
        threads = [threading.Thread(target=self.client, args=(i, go), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        go.wait()
        for t in threads:
            t.join()
        return self.now()


# -- main ------------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0, help="soak length (default 20)")
    ap.add_argument("--window-minutes", type=float, default=2.0, help="report window (default 2)")
    ap.add_argument("--clients", type=int, default=2, help="fixed concurrency: closed-loop clients (default 2)")
    ap.add_argument("--warmup-minutes", type=float, default=None, help="default: the first window")
    ap.add_argument("--engines", default=None, help="dr serve --engines FILE (default: the embedded tiny preset)")
    ap.add_argument("--batching", default=None, help="dr serve --batching MODE (default: dr serve's default)")
    ap.add_argument("--port", type=int, default=None, help="default: a free port on 127.0.0.1")
    ap.add_argument("--seed", type=int, default=0, help="the clients' RNG seed")
    ap.add_argument("--rss-interval", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--keep-store", action="store_true", help="keep the temporary store (its path is printed)")
    ap.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = ap.parse_args(argv)
    if args.warmup_minutes is None:
        args.warmup_minutes = args.window_minutes
    if args.minutes <= 0 or args.window_minutes <= 0 or args.clients < 1 or args.warmup_minutes < 0:
        ap.error("--minutes and --window-minutes must be > 0, --clients >= 1, --warmup-minutes >= 0")
    if args.warmup_minutes >= args.minutes:
        ap.error("--warmup-minutes must be shorter than --minutes")
    return args


def serve_command(store: Path, port: int, engines: str | None, batching: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "cli.main", "serve", "--store", str(store), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--group-size", str(GROUP_SIZE), "--run-id", RUN_ID] + (["--batching", batching] if batching else [])
    return cmd + (["--engines", str(Path(engines).resolve())] if engines else [])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    t_start = time.perf_counter()
    sets = make_sets(N_SETS, GROUP_SIZE)
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="dr-bench-soak-"))
    store, log_path = tmp / "store", tmp / "serve.log"
    cmd = serve_command(store, port, args.engines, args.batching)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    print(f"$ {' '.join(cmd)}   (log: {log_path})", flush=True)
    duration_s = args.minutes * 60
    log_file = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    rss_sampler = None
    try:
        ready, ready_s = wait_ready(base, proc, log_path, READY_TIMEOUT_S)
        print(f"ready after {ready_s:.1f} s: {ready}", flush=True)
        soak = Soak(base, sets, f"s{int(time.time())}", args.seed, duration_s, proc)
        rss_sampler = TreeRSS(proc.pid, interval=args.rss_interval)
        print(
            f"soak: {args.clients} clients for {args.minutes:g} min, windows of {args.window_minutes:g} min", flush=True
        )
        soak_wall = soak.run(args.clients)
        rss_sampler.stop()
        rss = [(t - soak.t0_wall, b) for t, b in rss_sampler.samples]
        metrics = {}
        if proc.poll() is None:
            with httpx.Client(timeout=30.0) as mc:
                try:
                    metrics = read_metrics(mc, base)
                except httpx.HTTPError as exc:
                    print(f"GET /metrics after the soak failed: {exc}", file=sys.stderr)
    finally:
        if rss_sampler is not None:
            rss_sampler.stop()
        exit_code = stop_server(proc)
        log_file.close()
    result = summarize(args, env, soak, ready, ready_s, rss, soak_wall, metrics, exit_code, store, log_path)
    result["total_wall_s"] = round(time.perf_counter() - t_start, 1)
    print_report(result)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    if args.keep_store:
        print(f"store kept: {store} (server log: {log_path})")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def summarize(args, env, soak: Soak, ready, ready_s, rss, soak_wall, metrics, exit_code, store, log_path) -> dict:
    duration_s, window_s, warmup_s = args.minutes * 60, args.window_minutes * 60, args.warmup_minutes * 60
    records = soak.records
    windows, drain = window_stats(records, rss, window_s, duration_s, warmup_s)
    end_s = min(duration_s, soak_wall)
    memory = memory_growth(rss, warmup_s, end_s)
    flat = p95_flatness(windows)
    errors = [r for r in records if r["error"] is not None]
    rows, rows_note = count_rows(soak.answered, soak.server_died, store, RUN_ID, exit_code)
    server_side = {
        k: int(metrics[k])
        for k in ("dr_requests_total", "dr_batches_total", "dr_batch_sets_count", "dr_batch_sets_sum")
        + ("dr_group_timeouts_total", "dr_engine_failures_total", "dr_unscorable_total")
        + ("dr_memory_trims_total", "dr_memory_trimmed_bytes_total")
        + ("dr_resident_after_trim_bytes", "dr_resident_bytes")
        if k in metrics
    }
    config = {
        "minutes": args.minutes,
        "window_minutes": args.window_minutes,
        "warmup_minutes": args.warmup_minutes,
        "clients": args.clients,
        "seed": args.seed,
        "mix": MIX,
        "grpo_prompts": GRPO_PROMPTS,
        "grpo_variants": GRPO_VARIANTS,
        "sets_sent": dict(soak.sent),
        "group_size": GROUP_SIZE,
        "rubric_rollouts": ROLLOUTS,
        "rss_interval_s": args.rss_interval,
        "data": str(DATA.relative_to(ROOT)),
        "engines": args.engines or "dr serve's default (--preset tiny), vLLM CPU",
        "batching": args.batching or "dr serve's default",
        "omp_num_threads": env["OMP_NUM_THREADS"],
    }
    return {
        **result_head("bench_soak", config),
        "server": ready,
        "startup_s": round(ready_s, 1),
        "server_exit_code": exit_code,
        "server_died": soak.server_died,
        "windows": windows,
        "drain": drain,
        "totals": totals(records),
        "memory": memory,
        "p95_flatness": flat,
        "p95_noise": p95_noise(records, window_s, duration_s, warmup_s),
        "latencies": [[round(r["t_end"], 2), round(r["latency_s"], 3), r["op"]] for r in records if r["error"] is None],
        "rows": rows,
        "rows_note": rows_note,
        "goals": goals(len(errors), flat, memory, rows),
        "server_metrics": server_side,
        "verdict_cache": cache_stats(metrics),
        "error_samples": [{k: r[k] for k in ("op", "route", "status", "error")} for r in errors[:20]],
        "server_log_tail": tail(log_path, 20).splitlines() if errors or soak.server_died else [],
        "soak_wall_s": round(soak_wall, 1),
    }


if __name__ == "__main__":
    main()
