"""Benchmark (not a test): ``sql/gap_by_round.sql`` through ``Store.connect()`` against a hand-written DuckDB query
reading the same Parquet files directly, on generated verdicts in the store layout; locally and on a real S3 server
(SeaweedFS ``weed mini`` on 127.0.0.1, the test fixture's launcher).

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python infra/benchmarks/bench_store.py  # 10M rows
    .venv/bin/python infra/benchmarks/bench_store.py --rows 200000 --backend local                              # quick

Data: per round, response sets with ``--rollouts`` rubric rollouts of ``--items`` items, each judged on 8 policy
responses (target C) and 11 ranked anchors; ~2% of verdicts NULL (unscorable). Reported: median seconds of
``--repeat`` runs after one warm-up, and the ratio named / hand-written (1.0 = no overhead).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dr_core.store import sql  # noqa: E402
from dr_core.store.artifacts import Store  # noqa: E402

K_POLICY, N_ANCHOR = 8, 11

HAND = """
WITH w AS (
    SELECT run_id, round, stage, set_id, rollout, item, weight,
           count(*) OVER (PARTITION BY run_id, round, stage, set_id, rollout) AS m
    FROM read_parquet('{rubrics}') WHERE item IS NOT NULL
), s AS (
    SELECT v.run_id, v.round, v.stage, v.set_id, v.rollout, v.response,
           CASE WHEN count(v.verdict) = any_value(w.m) THEN sum(w.weight * v.verdict::INT) / sum(w.weight) END AS score
    FROM read_parquet('{verdicts}') v JOIN w USING (run_id, round, stage, set_id, rollout, item)
    WHERE v.target = 'anchor' GROUP BY ALL
), r AS (
    SELECT *, count(score) OVER p AS n,
           count(score) OVER (p ORDER BY response ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS k
    FROM s WINDOW p AS (PARTITION BY run_id, round, stage, set_id, rollout)
), g AS (
    SELECT run_id, round, stage,
           CASE WHEN max(n) >= 2 THEN sum(score * (n - 2 * k + 1)) / (max(n) * (max(n) - 1) / 2.0) END AS gap
    FROM r GROUP BY run_id, round, stage, set_id, rollout
), d AS (
    SELECT run_id, round, stage, avg(r_disc) AS mean_r_disc FROM read_parquet('{rewards}') GROUP BY ALL
)
SELECT run_id, round, stage, avg(gap) AS mean_gap, any_value(mean_r_disc) AS mean_r_disc
FROM g JOIN d USING (run_id, round, stage) GROUP BY ALL ORDER BY ALL
"""


def generate(store: Store, rows: int, rounds: int, rollouts: int, items: int, seed: int = 0) -> int:
    """Write verdicts, rubrics and rewards for run ``bench`` (one part per round); return the verdict rows."""
    rng = np.random.default_rng(seed)
    per_set = rollouts * items * (K_POLICY + N_ANCHOR)
    sets = max(1, rows // (per_set * rounds))
    total = 0
    for rnd in range(rounds):
        set_id = np.arange(sets, dtype=np.int64) + rnd * sets
        total += _write_verdicts(store, rng, rnd, set_id, rollouts, items)
        _write_rubrics(store, rng, rnd, set_id, rollouts, items)
        _write_rewards(store, rng, rnd, set_id, rollouts)
    return total


def _write_verdicts(store: Store, rng, rnd: int, set_id, rollouts: int, items: int) -> int:
    """One round's verdicts, in the order set, rollout, item, response; returns their number."""
    targets = np.array(["C"] * K_POLICY + ["anchor"] * N_ANCHOR)
    responses = np.concatenate([np.arange(K_POLICY), np.arange(1, N_ANCHOR + 1)]).astype(np.int32)
    grid = np.stack(
        np.meshgrid(set_id, np.arange(rollouts), np.arange(items), np.arange(K_POLICY + N_ANCHOR), indexing="ij"),
        axis=-1,
    ).reshape(-1, 4)
    n = len(grid)
    p_yes = 0.8 - 0.05 * responses[grid[:, 3]] * (targets[grid[:, 3]] == "anchor")  # better anchors say yes more
    verdict = pa.array(rng.random(n) < p_yes, mask=rng.random(n) < 0.02)
    store.write(
        "verdicts",
        pa.table(
            {
                "stage": pa.array(["generator"] * n),
                "set_id": grid[:, 0],
                "rollout": grid[:, 1].astype(np.int32),
                "item": grid[:, 2].astype(np.int32),
                "target": pa.array(targets[grid[:, 3]]),
                "response": responses[grid[:, 3]],
                "verdict": verdict,
                "verifier": pa.array(["bench-verifier"] * n),
            }
        ),
        part="verify",
        run_id="bench",
        round=rnd,
    )
    return n


def _write_rubrics(store: Store, rng, rnd: int, set_id, rollouts: int, items: int) -> None:
    rgrid = np.stack(np.meshgrid(set_id, np.arange(rollouts), np.arange(items), indexing="ij"), -1).reshape(-1, 3)
    m = len(rgrid)
    store.write(
        "rubrics",
        pa.table(
            {
                "stage": pa.array(["generator"] * m),
                "set_id": rgrid[:, 0],
                "generator_ckpt": pa.array(["g"] * m),
                "rollout": rgrid[:, 1].astype(np.int32),
                "item": rgrid[:, 2].astype(np.int32),
                "criterion": pa.array([f"criterion {i}" for i in rgrid[:, 2]]),
                "weight": rng.integers(1, 6, m).astype(np.int8),
            }
        ),
        part="generate",
        run_id="bench",
        round=rnd,
    )


def _write_rewards(store: Store, rng, rnd: int, set_id, rollouts: int) -> None:
    sets = len(set_id)
    g = sets * rollouts
    store.write(
        "rewards",
        pa.table(
            {
                "stage": pa.array(["generator"] * g),
                "set_id": np.repeat(set_id, rollouts),
                "rollout": np.tile(np.arange(rollouts, dtype=np.int32), sets),
                "r_disc": rng.random(g) * 0.25,
                "r_anchor": -rng.random(g),
            }
        ),
        part="reward",
        run_id="bench",
        round=rnd,
    )


def timed(fn, repeat: int) -> tuple[float, object]:
    result = fn()  # warm-up (and S3 metadata/listing caches, as a long-lived connection would have)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench(store: Store, args) -> dict:
    t0 = time.perf_counter()
    n = generate(store, args.rows, args.rounds, args.rollouts, args.items)
    write_s = time.perf_counter() - t0
    size = sum(store.fs.size(store._path(u)) for t in ("verdicts", "rubrics", "rewards") for u in store.parts(t))
    con = store.connect()
    named_s, named = timed(lambda: sql.run(con, "gap_by_round").to_pylist(), args.repeat)
    hand_sql = HAND.format(**{t: store.table_glob(t) for t in ("verdicts", "rubrics", "rewards")})
    hand_s, hand = timed(lambda: con.sql(hand_sql).to_arrow_table().to_pylist(), args.repeat)
    assert len(named) == len(hand) == args.rounds
    for a, b in zip(named, hand):
        assert a["round"] == b["round"] and abs(a["mean_gap"] - b["mean_gap"]) < 1e-9, (a, b)
    return dict(
        verdict_rows=n,
        parquet_mib=size / 2**20,
        write_s=write_s,
        named_s=named_s,
        hand_s=hand_s,
        ratio=named_s / hand_s,
        mean_gap_round0=named[0]["mean_gap"],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="verdict rows to generate (default 10M)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", choices=["local", "s3", "both"], default="both")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="dr-bench-") as tmp:
        if args.backend in ("local", "both"):
            results["local"] = bench(Store.from_url(f"{tmp}/store"), args)
        if args.backend in ("s3", "both"):
            from dr_core.store.artifacts import S3Options
            from tests.support.fixtures_s3 import SeaweedServer

            server = SeaweedServer.start(Path(tmp) / "weed")
            try:
                env = server.env
                opts = S3Options(
                    env["AWS_ENDPOINT_URL"], env["AWS_REGION"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
                )
                results["s3"] = bench(Store.from_url("s3://dr-bench/store", opts), args)
            finally:
                server.stop()
    print(
        f"{'backend':8} {'verdicts':>10} {'MiB':>7} {'write s':>8} {'gap_by_round s':>15} {'hand-written s':>15} "
        f"{'ratio':>6}"
    )
    for name, r in results.items():
        print(
            f"{name:8} {r['verdict_rows']:>10,} {r['parquet_mib']:>7.1f} {r['write_s']:>8.1f} {r['named_s']:>15.3f} "
            f"{r['hand_s']:>15.3f} {r['ratio']:>6.2f}"
        )


if __name__ == "__main__":
    main()
