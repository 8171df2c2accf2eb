"""What the service benchmarks share (``bench_serve.py``, ``bench_soak.py``): the sets they send, a ``dr serve``
process's start and stop, its ``GET /metrics`` read into numbers, and the small statistics of the reports."""

from __future__ import annotations

import itertools
import json
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "dr_core" / "data" / "anchors_alpacaeval.jsonl"
HTTP_TIMEOUT_S = 600.0
READY_TIMEOUT_S = 1200.0
STOP_GRACE_S = 30.0


# -- data -------------------------------------------------------------------------------------------------------
def result_head(name: str, config: dict) -> dict:
    """The head of a benchmark's JSON result: its name, the command line that ran it, its configuration."""
    return {"benchmark": name, "command": " ".join([Path(sys.executable).name] + sys.argv), "config": config}


def fresh_sets(k: int, seed: int, exclude: list[dict] = ()) -> list[dict]:
    """Every set of k of a prompt's responses (each prompt's k-combinations, in their order), shuffled by ``seed``:
    48 prompts of 11 responses give 15,840, so a soak can send each once (``exclude``: sets it must not send)."""
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    skip = {(s["prompt"], tuple(s["responses"])) for s in exclude}
    out = [
        {"source_id": row["id"], "prompt": row["prompt"], "responses": [row["responses"][i] for i in idx]}
        | {"response_indices": list(idx)}
        for row in rows
        for idx in itertools.combinations(range(len(row["responses"])), k)
    ]
    random.Random(seed).shuffle(out)
    return [s for s in out if (s["prompt"], tuple(s["responses"])) not in skip]


GRPO_PROMPTS, GRPO_VARIANTS = 4, 3  # bench_soak's GRPO-like steps: prompts, response sets of each (one pass: ~5 min)


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


def percentile(xs: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not xs:
        return None
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def grpo_sets(sets: list[dict]) -> list[dict]:
    """The GRPO-like steps' response sets: ``GRPO_VARIANTS`` per training prompt (the first ``GRPO_PROMPTS`` sets),
    the first as drawn and each other with one response swapped for one of another set's."""
    out = []
    for i, s in enumerate(sets[:GRPO_PROMPTS]):
        for v in range(GRPO_VARIANTS):
            responses = list(s["responses"])
            if v:
                responses[v % len(responses)] = sets[(i + v * GRPO_PROMPTS) % len(sets)]["responses"][0]
            out.append({"prompt": s["prompt"], "responses": responses})
    return out
