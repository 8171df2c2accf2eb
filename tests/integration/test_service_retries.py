"""The retry rule of ``/get_reward`` on a real ``dr serve`` (scripted engines over real HTTP): a batch answered 504
keeps the groups it scored, and the same body sent again replays them from the ledger; a client that retries
every batch under a slow engine leaves every set scored once and gets one answer per body."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from dr_core.store.artifacts import Store
from tests.support.scripted_server import ScriptedServer
from tests.support.serve_proc import ServeProcess, engines_file


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServer() as srv:
        yield srv


def _serve(tmp_path, scripted, timeout_s: int) -> ServeProcess:
    return ServeProcess(
        tmp_path,
        store=tmp_path / "store",
        engines=engines_file(tmp_path / "engines.yaml", scripted.base_url),
        args=("--group-size", "2", "--group-timeout", str(timeout_s)),
    )


def _batch(*pairs: tuple[str, str]) -> dict:
    return {"query": [p + r for p, r in pairs], "prompts": [p for p, _ in pairs], "labels": [""] * len(pairs)}


def _table(srv: ServeProcess, name: str) -> list[dict]:
    return Store.from_url(str(srv.store)).read_table(name, run_id="service", round=0).to_pylist()


def _scored_once(srv: ServeProcess) -> Counter:
    """How many set ids hold each (prompt, responses) set; every verdict key appears once."""
    samples = _table(srv, "samples")
    by_set: dict[int, list] = {}
    for s in samples:
        by_set.setdefault(s["set_id"], []).append((s["response_idx"], s["prompt_id"], s["response"]))
    sets = Counter((v[0][1], tuple(r for _, _, r in sorted(v))) for v in by_set.values())
    keys = Counter((v["set_id"], v["rollout"], v["item"], v["target"], v["response"]) for v in _table(srv, "verdicts"))
    assert keys and set(keys.values()) == {1}, "a verdict row is stored twice"
    return sets


def test_a_504_batch_keeps_its_scored_groups_and_the_same_body_replays_them(tmp_path, scripted):
    scripted.reset()
    a, b = "<|user|>Name a colour.<|assistant|>", "<|user|>Name a fruit.<|assistant|>"
    body = _batch((a, "Red."), (a, "Blue, I think."), (b, "Apple."))  # b's group has 1 of 2 members
    with _serve(tmp_path, scripted, 3) as srv, srv.client() as c:
        r = c.post("/get_reward", json=body)
        assert r.status_code == 504 and r.json()["error"] == "group_incomplete", r.text
        assert "1 of 3 queries" in r.json()["detail"] and "other 2 were scored" in r.json()["detail"]
        first = {row["request_id"]: row for row in _table(srv, "requests")}
        assert len(first) == 2  # a's group, committed
        # the retry of the same body, with b's second query arriving from another batch meanwhile
        with ThreadPoolExecutor(2) as pool:
            retry = pool.submit(c.post, "/get_reward", json=body)
            time.sleep(0.5)
            other = pool.submit(c.post, "/get_reward", json=_batch((b, "A ripe pear.")))
            retry, other = retry.result(), other.result()
        assert retry.status_code == 200 and other.status_code == 200, (retry.text, other.text)
        out = retry.json()
        assert out["request_ids"][:2] == sorted(first)  # replayed: the same request ids and rewards
        assert out["rewards"][:2] == pytest.approx([first[rid]["reward"] for rid in out["request_ids"][:2]])
        assert c.post("/get_reward", json=body).json() == out  # and again: answered once
        assert len(_table(srv, "requests")) == 4
        assert set(_scored_once(srv).values()) == {1}


def test_a_client_retrying_every_batch_three_times_under_a_slow_engine_scores_each_set_once(tmp_path, scripted):
    """8 batches of two groups each, every body sent 4 times (at once or after a client timeout, with jitter),
    while the engine holds its first 24 calls for 1.5 s; bounded at 180 s."""
    scripted.reset()
    bodies = [
        _batch(
            *(
                (f"<|user|>Question {i}.{j}: name a tool.<|assistant|>", f"answer {k} of {i}")
                for j in (0, 1)
                for k in (0, 1)
            )
        )
        for i in range(8)
    ]
    got: dict[int, list[dict]] = {i: [] for i in range(len(bodies))}
    statuses: Counter = Counter()
    lock, deadline = threading.Lock(), time.monotonic() + 180
    with _serve(tmp_path, scripted, 120) as srv:
        scripted.hang_next(24, 1.5)

        def send(i: int, attempt: int) -> None:
            rng = random.Random(i * 10 + attempt)
            time.sleep(rng.uniform(0, 1.0))
            timeout = 1.0 if attempt < 2 else 150.0  # the first two attempts give up early and retry
            while time.monotonic() < deadline:
                try:
                    with httpx.Client(base_url=srv.url, timeout=timeout) as c:
                        r = c.post("/get_reward", json=bodies[i])
                except httpx.TimeoutException:
                    with lock:
                        statuses["client timeout"] += 1
                    time.sleep(rng.uniform(0, 0.5))
                    timeout = 150.0
                    continue
                with lock:
                    statuses[r.status_code] += 1
                    if r.status_code == 200:
                        got[i].append(r.json())
                return

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda ia: send(*ia), [(i, a) for i in range(len(bodies)) for a in range(4)]))
        assert time.monotonic() < deadline, "the retry storm ran past its bound"
        requests = _table(srv, "requests")
        sets = _scored_once(srv)
    assert statuses[200] == 32 and set(statuses) <= {200, "client timeout"}, statuses
    assert statuses["client timeout"] >= 1  # the storm did retry
    assert all(len({json.dumps(a, sort_keys=True) for a in v}) == 1 for v in got.values())  # one answer per body
    assert len(requests) == 32 and len({r["request_id"] for r in requests}) == 32
    assert len(sets) == 16 and set(sets.values()) == {1}  # 16 groups, each scored into one set id


def _metric(c: httpx.Client, name: str) -> float | None:
    values = [float(x.rsplit(" ", 1)[1]) for x in c.get("/metrics").text.splitlines() if x.startswith(name + " ")]
    return values[0] if values else None


def test_the_verdict_cache_answers_a_repeated_set_and_changes_no_answer(tmp_path, scripted):
    """The same set under two request ids: the second asks the engines for its rubric only (its verdicts are hits);
    a service with the cache off gives the same answers."""
    body = {"prompt": "Name a prime number.", "responses": ["7", "Nine.", "2 is prime."], "rubric_rollouts": 2}

    def answers(work, *args) -> tuple[list[dict], dict]:
        work.mkdir()
        srv = ServeProcess(
            work,
            store=work / "store",
            engines=engines_file(work / "engines.yaml", scripted.base_url),
            args=args,
        )
        got, seen = [], {}
        with srv, srv.client() as c:
            for rid in ("first", "second"):
                asked = scripted.counts["requests"]
                r = c.post("/v1/score-set", json={**body, "request_id": rid})
                assert r.status_code == 200, r.text
                got.append({k: v for k, v in r.json().items() if k not in ("request_id", "set_id", "rubric_id")})
                seen[rid] = (scripted.counts["requests"] - asked, _metric(c, "dr_verdict_cache_hits_total"))
            seen["misses"] = _metric(c, "dr_verdict_cache_misses_total")
        return got, seen

    scripted.reset()
    (on1, on2), on = answers(tmp_path / "on")
    (off1, off2), off = answers(tmp_path / "off", "--verdict-cache-entries", "0")
    assert on1 == on2 == off1 == off2  # rubrics, verdicts, scores, R_disc
    checks = sum(len(r["rubric"]) * len(body["responses"]) for r in on1["rubrics"])
    assert on["first"][1] == 0 and on["second"][1] == on["misses"] == checks  # every verdict of the repeat a hit
    assert on["second"][0] == 2 < on["first"][0]  # the repeat asked for its two rubrics only
    assert off["first"][0] == off["second"][0] and off["second"][1] is None  # off: asked again, no cache series
