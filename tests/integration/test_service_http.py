"""``dr serve`` as a real HTTP service on 127.0.0.1: a real process, real uvicorn, a real store; its engines are
the scripted OpenAI-compatible server (tests/support/scripted_server.py, real HTTP) so that the routes, groups, faults
and
lineage are tested at full speed. The real-model and real-trainer test is tests/integration/test_service_trl.py.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pyarrow.compute as pc
import pytest

from dr_core.service.clients import _post
from dr_core.service.memory import find_malloc_trim
from dr_core.store.artifacts import Store
from tests.support.scripted_server import ScriptedServer
from tests.support.serve_proc import ROOT, ServeProcess, engines_file

TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def served(scripted, tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    (work / "token").write_text(TOKEN + "\n")
    srv = ServeProcess(
        work,
        store=work / "store",
        engines=engines_file(work / "engines.yaml", scripted.base_url),
        args=("--token-file", str(work / "token"), "--group-timeout", "3", "--group-size", "2")
        + ("--memory-trim-interval", "0.2"),
    )
    with srv:
        yield srv


@pytest.fixture
def client(served, scripted):
    scripted.reset()
    with served.client(TOKEN) as c:
        yield c


def _store(srv) -> Store:
    return Store.from_url(str(srv.store))


def _rows(srv, table: str) -> int:
    return _store(srv).read_table(table, run_id="service", round=0).num_rows


def _parts(srv) -> list[str]:
    root = srv.store
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet")) if root.exists() else []


def _metric(c: httpx.Client, name: str) -> float:
    total = 0.0
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name) and not line.startswith(name + "_"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _error_of(r: httpx.Response, status: int, code: str, field: str | None = None) -> dict:
    """The answer, checked to be the one error shape (``requests.ErrorBody``) with this status, code and field."""
    body = r.json()
    assert r.status_code == status and r.headers["content-type"] == "application/json", (r.status_code, r.text)
    assert set(body) == {"error", "detail", "field"} and isinstance(body["detail"], str) and body["detail"], body
    assert (body["error"], body["field"]) == (code, field), body
    return body


SET = {"prompt": "Which planet is closest to the sun?", "responses": ["Mercury.", "Venus, I think.", "Mars"]}


# -- health, auth ----------------------------------------------------------------------------------------------------


def test_probes_are_open_and_everything_else_needs_the_token(served):
    with served.client() as anon:
        assert anon.get("/health").json() == {"status": "ok"}
        ready = anon.get("/ready").json()
        assert ready["status"] == "ready" and ready["generator"] == "scripted-model"
        for method, path in [
            ("get", "/metrics"),
            ("post", "/v1/score-set"),
            ("post", "/v1/rewards"),
            ("post", "/get_reward"),
            ("post", "/verify"),
            ("post", "/seed_session"),
        ]:
            r = getattr(anon, method)(path, **({"json": SET} if method == "post" else {}))
            _error_of(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer", path
    with served.client("wrong-token-wrong-token-wrong") as bad:
        assert bad.post("/v1/score-set", json=SET).status_code == 401
    with served.client(TOKEN) as good:
        assert good.get("/metrics").status_code == 200
    assert TOKEN not in served.logs()


def test_every_kind_of_error_has_the_one_shape(client, served):
    """401, 404, 405, 413 and 422 here (503 and 504: the engine-failure and group-timeout tests below)."""
    before = _parts(served)
    with served.client() as anon:
        _error_of(anon.post("/v1/rewards", json={}), 401, "unauthorized")
    _error_of(client.get("/no/such/route"), 404, "not_found")
    _error_of(client.post("/health"), 405, "method_not_allowed")
    assert client.get("/v1/score-set").headers["allow"] == "POST"
    _error_of(client.post("/get_reward", content=b"x" * (1 << 21)), 413, "body_too_large", "body")
    _error_of(client.post("/get_reward", content=b"{"), 422, "invalid_request", "body")
    _error_of(client.post("/v1/rewards", json={"group_id": "g"}), 422, "invalid_request", "group_size")
    _error_of(client.post("/get_reward", json={"query": ["a"], "prompts": [""]}), 422, "invalid_request", "prompts.0")
    assert _parts(served) == before


# -- /v1/score-set -----------------------------------------------------------------------------------------------------


def test_score_set_returns_rubric_verdicts_eq12_scores_and_r_disc(client, served):
    r = client.post("/v1/score-set", json={**SET, "request_id": "set-1", "rubric_rollouts": 2})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["request_id"] == "set-1" and len(a["rubrics"]) == 2 and a["unscorable"] == []
    for rub in a["rubrics"]:
        w = np.array([it["weight"] for it in rub["rubric"]], float)
        v = np.array(rub["verdicts"], float)
        assert v.shape == (3, len(w))
        np.testing.assert_allclose(rub["scores"], v @ w / w.sum())  # Eq. 12
        vbar = v.mean(axis=0)
        assert rub["r_disc"] == pytest.approx(float((w * vbar * (1 - vbar)).sum() / w.sum()))  # Eq. 13
    np.testing.assert_allclose(a["scores"], np.mean([rub["scores"] for rub in a["rubrics"]], axis=0))
    # lineage: the set once, under stage service, with the request id
    req = _store(served).read_table("requests", run_id="service", round=0).to_pylist()
    mine = [x for x in req if x["request_id"] == "set-1"]
    assert len(mine) == 1 and mine[0]["stage"] == "service" and mine[0]["set_id"] == a["set_id"]
    assert json.loads(mine[0]["answer_json"]) == a


def test_a_request_id_is_answered_once(client, served):
    first = client.post("/v1/score-set", json={**SET, "request_id": "once-1"}).json()
    rows = {t: _rows(served, t) for t in ("requests", "samples", "verdicts")}
    again = client.post("/v1/score-set", json={**SET, "request_id": "once-1"})
    assert again.status_code == 200 and again.json() == first
    assert {t: _rows(served, t) for t in rows} == rows  # replayed, not scored again
    other = client.post("/v1/score-set", json={**SET, "responses": ["Pluto", "Earth"], "request_id": "once-1"})
    assert other.status_code == 422 and other.json()["field"] == "request_id"


BAD_BODIES = [
    (b"{not json", "body"),
    (b"[1, 2]", "body"),
    (json.dumps({"prompt": "p", "responses": []}).encode(), "responses"),
    (json.dumps({"prompt": "p", "responses": "one string"}).encode(), "responses"),
    (json.dumps({"prompt": "p", "responses": ["a", 3]}).encode(), "responses.1"),
    (json.dumps({"prompt": 7, "responses": ["a"]}).encode(), "prompt"),
    (json.dumps({"prompt": "p", "responses": ["a"], "rubric_rollouts": "2"}).encode(), "rubric_rollouts"),
    (json.dumps({"prompt": "p", "responses": ["a"], "request_id": "has space"}).encode(), "request_id"),
    (json.dumps({"prompt": "p", "responses": ["a"], "temperature": 1}).encode(), "temperature"),
]


@pytest.mark.parametrize("raw,field", BAD_BODIES, ids=[f for _, f in BAD_BODIES])
def test_bad_score_set_bodies_get_422_naming_the_field_and_write_nothing(client, served, raw, field):
    before = _parts(served)
    r = client.post("/v1/score-set", content=raw, headers={"content-type": "application/json"})
    _error_of(r, 422, "invalid_request", field)
    assert _parts(served) == before


@pytest.mark.parametrize(
    "body,field",
    [
        ({"group_id": "g", "group_size": 1, "prompt": "p", "response": "r", "request_id": "x"}, "group_size"),
        ({"group_id": "g", "group_size": 2, "prompt": "p", "response": "r"}, "request_id"),
        ({"group_id": "g", "group_size": "2", "prompt": "p", "response": "r", "request_id": "x"}, "group_size"),
        ({"group_id": "", "group_size": 2, "prompt": "p", "response": "r", "request_id": "x"}, "group_id"),
    ],
)
def test_bad_reward_bodies_get_422(client, served, body, field):
    before = _parts(served)
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert _parts(served) == before


def test_an_oversized_body_gets_413_and_writes_nothing(client, served):
    before = _parts(served)
    r = client.post("/v1/score-set", json={"prompt": "p", "responses": ["x" * 600_000, "y" * 600_000]})
    _error_of(r, 413, "body_too_large", "body")
    assert "1048576" in r.json()["detail"] and _parts(served) == before


# -- /v1/rewards: groups ---------------------------------------------------------------------------------------------


def _member(gid: str, i: int, size: int = 3, prompt: str = "Name a fruit.") -> dict:
    return {
        "group_id": gid,
        "group_size": size,
        "prompt": prompt,
        "response": f"answer {i}: apple {i * 7}",
        "request_id": f"{gid}-m{i}",
    }


def test_members_are_held_until_the_group_is_complete_and_scored_once(client, served):
    before = _rows(served, "samples")
    with ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(client.post, "/v1/rewards", json=_member("grp-a", i)) for i in (0, 1)]
        time.sleep(0.5)
        assert not any(f.done() for f in futs)  # two of three: still waiting
        futs += [pool.submit(client.post, "/v1/rewards", json=_member("grp-a", i)) for i in (2, 1)]  # 1 twice
        answers = [f.result().json() for f in futs]
    assert [a["request_id"] for a in answers] == ["grp-a-m0", "grp-a-m1", "grp-a-m2", "grp-a-m1"]
    assert answers[1] == answers[3]  # the duplicate got the same answer
    assert len({a["set_id"] for a in answers}) == 1 and len({a["rubric_id"] for a in answers}) == 1
    assert all(isinstance(a["reward"], float) and 0 <= a["reward"] <= 1 for a in answers)
    assert _rows(served, "samples") == before + 3  # one set of three
    # a retry after the answer is replayed; a new member of a scored group is refused
    assert client.post("/v1/rewards", json=_member("grp-a", 2)).json() == answers[2]
    late = client.post("/v1/rewards", json=_member("grp-a", 5))
    assert late.status_code == 422 and late.json()["field"] == "group_id"


def test_a_member_that_disagrees_with_its_group_is_refused(client, served):
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, "/v1/rewards", json=_member("grp-b", 0, size=2))
        time.sleep(0.3)
        r = client.post("/v1/rewards", json=_member("grp-b", 1, size=3))
        assert r.status_code == 422 and r.json()["field"] == "group_size"
        r = client.post("/v1/rewards", json=_member("grp-b", 1, size=2, prompt="Another prompt"))
        assert r.status_code == 422 and r.json()["field"] == "prompt"
        r = client.post("/v1/rewards", json={**_member("grp-b", 0, size=2), "response": "changed"})
        assert r.status_code == 422 and r.json()["field"] == "request_id"
        ok = client.post("/v1/rewards", json=_member("grp-b", 1, size=2))
        assert ok.status_code == 200 and first.result().json()["set_id"] == ok.json()["set_id"]


def test_an_incomplete_group_times_out_with_an_explicit_error(client, served):
    before_parts, timeouts = _parts(served), _metric(client, "dr_group_timeouts_total")
    t0 = time.monotonic()
    r = client.post("/v1/rewards", json=_member("grp-lonely", 0, size=2))
    waited = time.monotonic() - t0
    _error_of(r, 504, "group_incomplete")
    assert "1 of 2" in r.json()["detail"] and 2.5 < waited < 30
    assert _parts(served) == before_parts
    assert _metric(client, "dr_group_timeouts_total") == timeouts + 1
    # the group is forgotten: a retry with its whole group is scored
    with ThreadPoolExecutor(2) as pool:
        rs = list(pool.map(lambda i: client.post("/v1/rewards", json=_member("grp-lonely", i, size=2)), (0, 1)))
    assert [x.status_code for x in rs] == [200, 200]


# -- /get_reward: OpenRLHF's --remote_rm_url -------------------------------------------------------------------------


def test_openrlhf_remote_rm_shape(client, served):
    # OpenRLHF's remote_rm_fn posts {"query": prompt+response texts, "prompts": [...], "labels": [...]} and reads
    # "rewards" (and "scores", "extra_logs") back (openrlhf/utils/remote_rm_utils.py)
    prompts = ["<|user|>Say hi.<|assistant|>", "<|user|>Count to two.<|assistant|>"]
    responses = ["Hi!", "Hello there.", "1 2", "one, two"]
    body = {
        "query": [prompts[i // 2] + r for i, r in enumerate(responses)],
        "prompts": [prompts[i // 2] for i in range(4)],
        "labels": ["", "", "", ""],
    }
    r = client.post("/get_reward", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["rewards"]) == 4 and len(out["scores"]) == 4
    assert all(isinstance(x, float) for x in out["rewards"])
    assert set(out["extra_logs"]) >= {"dr_unscorable"} and len(out["extra_logs"]["dr_unscorable"]) == 4
    samples = _store(served).read_table("samples", run_id="service", round=0).to_pylist()
    assert {s["response"] for s in samples} >= set(responses)  # the prompt prefix was removed
    req = {r["request_id"]: r for r in _store(served).read_table("requests", run_id="service", round=0).to_pylist()}
    assert [req[rid]["reward"] for rid in out["request_ids"]] == pytest.approx(out["rewards"])  # traceable
    bad = client.post("/get_reward", json={"query": ["a", "b"], "prompts": ["a"]})
    assert bad.status_code == 422 and bad.json()["field"] == "prompts"


# -- engine failure --------------------------------------------------------------------------------------------------


def test_an_engine_failure_is_503_counted_and_writes_nothing(client, served, scripted):
    before, failures = _parts(served), _metric(client, "dr_engine_failures_total")
    scripted.fail_next(1000, status=500)
    r = client.post("/v1/score-set", json={**SET, "request_id": "engine-down"})
    _error_of(r, 503, "engine_failure")
    assert _metric(client, "dr_engine_failures_total") == failures + 1 and _parts(served) == before
    scripted.reset()
    again = client.post("/v1/score-set", json={**SET, "request_id": "engine-down"})
    assert again.status_code == 200 and again.json()["request_id"] == "engine-down"


def test_metrics_are_prometheus_text(client):
    assert client.post("/v1/score-set", json={**SET, "request_id": "for-metrics"}).status_code == 200
    text = client.get("/metrics").text
    for name in (
        "dr_requests_total",
        "dr_request_seconds_bucket",
        "dr_batch_sets_count",
        "dr_queue_depth",
        "dr_open_groups",
        "dr_unscorable_total",
        "dr_group_timeouts_total",
        "dr_engine_failures_total",
        'dr_stage_seconds_total{stage="verification"}',
    ):
        assert name in text, name
    assert "# TYPE dr_request_seconds histogram" in text
    assert 'dr_requests_total{route="/v1/score-set",status="200"}' in text


@pytest.mark.skipif(find_malloc_trim() is None, reason="this C library has no malloc_trim")
def test_the_process_trims_its_memory_and_shows_its_resident_set(client):
    assert _metric(client, "dr_resident_bytes") > 20 * 2**20  # a Python process with FastAPI loaded
    deadline = time.monotonic() + 30
    while _metric(client, "dr_memory_trims_total") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _metric(client, "dr_memory_trims_total") >= 2  # every 0.2 s (--memory-trim-interval)
    after = _metric(client, "dr_resident_after_trim_bytes")
    assert 20 * 2**20 < after <= _metric(client, "dr_resident_bytes") * 1.5


def test_why_reward_query_explains_a_reward(client, served):
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda i: client.post("/v1/rewards", json=_member("grp-why", i, size=2)).json(), (0, 1))
        )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "query",
            "why_reward",
            "--store",
            str(served.store),
            "-p",
            "request_id=grp-why-m1",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and {r["request_id"] for r in rows} == {"grp-why-m1"}
    assert {r["response"] for r in rows} == {_member("grp-why", 1)["response"]}
    w = np.array([r["weight"] for r in rows], float)
    v = np.array([r["verdict"] for r in rows], float)
    assert rows[0]["reward"] == pytest.approx(answers[1]["reward"]) == pytest.approx(float(v @ w / w.sum()))
    assert [r["score"] for r in rows] == pytest.approx([answers[1]["reward"]] * len(rows))


# -- load --------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_16_concurrent_clients_200_requests_each_answered_once(scripted, tmp_path):
    """50 groups of 4 members (/v1/rewards) plus 8 duplicates, from 16 threads, bounded at 240 s."""
    scripted.reset()
    srv = ServeProcess(
        tmp_path,
        store=tmp_path / "store",
        engines=engines_file(tmp_path / "e.yaml", scripted.base_url),
        args=("--group-timeout", "120"),
    )
    bodies = [
        _member(f"load-{g}", i, size=4, prompt=f"Prompt number {g}: name a colour.")
        for g in range(50)
        for i in range(4)
    ]
    dup = bodies[3::25]  # 8 members sent twice
    work: queue.Queue = queue.Queue()
    for b in bodies + dup:
        work.put(b)
    got: list[tuple[str, int, dict]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 240

    def client_loop():
        with srv.client(timeout=200) as c:
            while time.monotonic() < deadline:
                try:
                    b = work.get_nowait()
                except queue.Empty:
                    return
                r = c.post("/v1/rewards", json=b)
                with lock:
                    got.append((b["request_id"], r.status_code, r.json()))

    with srv:
        threads = [threading.Thread(target=client_loop) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(1.0, deadline - time.monotonic() + 5))
        assert not any(t.is_alive() for t in threads), "load test ran past its bound"
        with srv.client() as c:
            batches = _metric(c, "dr_batches_total")
    assert len(got) == 208 and {s for _, s, _ in got} == {200}
    assert all(rid == ans["request_id"] for rid, _, ans in got)
    by_id: dict[str, list[dict]] = {}
    for rid, _, ans in got:
        by_id.setdefault(rid, []).append(ans)
    assert len(by_id) == 200 and all(len({json.dumps(a, sort_keys=True) for a in v}) == 1 for v in by_id.values())
    store = Store.from_url(str(tmp_path / "store"))
    req = store.read_table("requests", run_id="service", round=0)
    assert req.num_rows == 200 and len(set(req.column("request_id").to_pylist())) == 200
    samples = store.read_table("samples", run_id="service", round=0)
    keys = Counter(zip(samples.column("set_id").to_pylist(), samples.column("response_idx").to_pylist()))
    assert len(keys) == 200 and set(keys.values()) == {1}  # every set stored once
    assert len(set(samples.column("set_id").to_pylist())) == 50
    assert 1 <= batches <= 50


# -- kill mid-batch, restart -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_killed_mid_batch_then_restarted_retries_succeed_and_no_row_is_duplicated(scripted, tmp_path):
    scripted.reset()
    store_dir = tmp_path / "store"
    srv = ServeProcess(tmp_path, store=store_dir, engines=engines_file(tmp_path / "e.yaml", scripted.base_url))
    body = {**SET, "request_id": "before-kill"}
    # the first process answers one request, then dies half-way through the verdicts write of the next batch
    srv.start(env={"DR_FAULT": "kill@store-write:verdicts#2"})
    with srv.client() as c:
        done_before = c.post("/v1/score-set", json=body).json()
    result: dict = {}

    def retrying_client():
        with httpx.Client(timeout=60) as c:
            result["answer"] = _post(
                c, f"{srv.url}/v1/score-set", {**SET, "responses": ["A", "B"], "request_id": "during-kill"}, {}, 8
            )

    t = threading.Thread(target=retrying_client)
    t.start()
    srv.proc.wait(60)
    assert srv.proc.returncode == -9  # SIGKILL from the fault point
    store = Store.from_url(str(store_dir))
    orphans = [
        u
        for u in store.parts("samples", run_id="service", round=0)
        if u.rsplit("/", 1)[1] not in {p.rsplit("/", 1)[1] for p in store.parts("requests", run_id="service", round=0)}
    ]
    assert len(orphans) == 1  # the killed batch's samples part, never committed
    srv.start()  # no fault: the sweep removes the killed batch's parts, the client's retry gets through
    t.join(120)
    assert not t.is_alive() and result["answer"]["request_id"] == "during-kill"
    with srv.client() as c:
        assert c.post("/v1/score-set", json=body).json() == done_before  # answered by the first process
        assert (
            c.post("/v1/score-set", json={**SET, "responses": ["A", "B"], "request_id": "during-kill"}).json()
            == result["answer"]
        )
    assert srv.stop() == 0  # SIGTERM: a clean shutdown
    assert "removed" in srv.logs() and "did not commit" in srv.logs()
    samples = store.read_table("samples", run_id="service", round=0)
    keys = Counter(zip(samples.column("set_id").to_pylist(), samples.column("response_idx").to_pylist()))
    assert set(keys.values()) == {1} and len(keys) == 3 + 2
    req = store.read_table("requests", run_id="service", round=0)
    assert sorted(req.column("request_id").to_pylist()) == ["before-kill", "during-kill"]
    sid = result["answer"]["set_id"]
    assert pc.sum(
        pc.equal(store.read_table("rubrics", run_id="service", round=0).column("set_id"), sid)
    ).as_py() == len(result["answer"]["rubrics"][0]["rubric"])


# -- bad start-up input: one line, exit 2, before any engine loads ---------------------------------------------------


def _serve(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def test_bad_start_up_input_is_one_line_and_exit_2(tmp_path, scripted):
    short = tmp_path / "short-token"
    short.write_text("abc\n")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("generator: {kind: nonsense}\n")
    busy = ServeProcess(
        tmp_path, store=tmp_path / "busy-store", engines=engines_file(tmp_path / "e.yaml", scripted.base_url)
    )
    cases = [
        (("--token-file", str(tmp_path / "missing")), "cannot read the token file"),
        (("--token-file", str(short)), "shorter than 16 characters"),
        (("--engines", str(bad_yaml)), "invalid engine config"),
        (("--port", "70000"), "--port 70000"),
        (("--run-id", "has space"), "run_id"),
    ]
    for args, expect in cases:
        out = _serve("--store", str(tmp_path / "store"), *args)
        assert out.returncode == 2 and expect in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    with busy:
        out = _serve("--store", str(tmp_path / "store"), "--port", str(busy.port))
        assert out.returncode == 2 and "already in use" in out.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))
