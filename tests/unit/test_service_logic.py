"""The reward service's pure logic: request checks, group collection, batching order, metrics text, the ledger's
commit protocol on a real local store, and the clients' grouping. Fake engines only (tests/support/fakes.py); the routes
over real HTTP are tests/integration/test_service_http.py."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest

from dr_core.config.service import ServiceSettings
from dr_core.service import clients
from dr_core.service.answers import answer_batch
from dr_core.service.batcher import Batcher, Unavailable
from dr_core.service.groups import GroupCollector, GroupIncomplete, TooManyGroups
from dr_core.service.ledger import Ledger
from dr_core.service.metrics import Metrics
from dr_core.service.requests import BadRequest, OpenRLHFBatch, RewardMember, ScoreSet, parse
from dr_core.service.scoring import Member, SetJob, score_jobs, set_id_of
from dr_core.store.artifacts import Store, StoreError
from tests.support import fakes

RUBRIC = json.dumps(
    {"rubrics": [{"criterion": "Names a fruit.", "weight": 3}, {"criterion": "Is one word.", "weight": 1}]}
)


def _engine():
    return fakes.FakeEngine(RUBRIC, verdict=fakes.hashed_verdict)


def _member(rid: str, index=None, group=None) -> Member:
    return Member(rid, "rewards" if group else "score-set", "fp-" + rid, datetime.now(timezone.utc), index, group)


# -- request checks ----------------------------------------------------------------------------------------------


def test_limits_name_the_field():
    s = ServiceSettings(max_text_chars=10, max_responses=2, max_body_bytes=2048)
    with pytest.raises(BadRequest) as e:
        parse(ScoreSet, json.dumps({"prompt": "p", "responses": ["ok", "x" * 11]}).encode(), s)
    assert e.value.field == "responses.1" and e.value.status == 422
    with pytest.raises(BadRequest) as e:
        parse(ScoreSet, json.dumps({"prompt": "p", "responses": ["a", "b", "c"]}).encode(), s)
    assert e.value.field == "responses"
    with pytest.raises(BadRequest) as e:
        parse(ScoreSet, b" " * 3000, s)
    assert e.value.field == "body" and e.value.status == 413
    with pytest.raises(BadRequest) as e:
        parse(
            RewardMember,
            json.dumps({"group_id": "g", "group_size": 3, "prompt": "p", "response": "r", "request_id": "r1"}).encode(),
            s,
        )
    assert e.value.field == "group_size"  # larger than max_responses


def test_openrlhf_pairs_strip_the_prompt_prefix():
    b = OpenRLHFBatch(query=["<u>hi<a>hello", "unrelated"], prompts=["<u>hi<a>", "<u>x<a>"], labels=["", ""])
    assert b.pairs() == [("<u>hi<a>", "hello"), ("<u>x<a>", "unrelated")]
    with pytest.raises(BadRequest) as e:
        parse(
            OpenRLHFBatch,
            json.dumps({"query": ["a"], "prompts": ["a"], "labels": ["x", "y"]}).encode(),
            ServiceSettings(),
        )
    assert e.value.field == "labels"


# -- groups --------------------------------------------------------------------------------------------------------


def _run(coro):
    return asyncio.run(coro)


def test_a_group_completes_once_and_duplicates_share_its_answer():
    async def main():
        completed = []
        col = GroupCollector(
            lambda g: (completed.append(g), g.future.set_result({"n": len(g.members)})), timeout_s=5, max_open=4
        )
        f0 = col.join("g", 3, "p", "a", _member("m0", group="g"))
        f0b = col.join("g", 3, "p", "a", _member("m0", group="g"))  # the same member again
        assert f0b is f0 and not completed and len(col.open["g"].members) == 1
        col.join("g", 3, "p", "b", _member("m1", group="g"))
        f2 = col.join("g", 3, "p", "c", _member("m2", group="g"))
        assert len(completed) == 1 and [r for r, _ in completed[0].members.values()] == ["a", "b", "c"]
        assert await f2 == {"n": 3} and await f0 == {"n": 3} and "g" not in col.open

    _run(main())


def test_disagreeing_members_are_refused_and_change_nothing():
    async def main():
        col = GroupCollector(lambda g: None, timeout_s=5, max_open=1, scored=lambda gid: gid == "done")
        col.join("g", 2, "p", "a", _member("m0", group="g"))
        for args, field in [
            (("g", 3, "p", "b", _member("m1", group="g")), "group_size"),
            (("g", 2, "q", "b", _member("m1", group="g")), "prompt"),
            (("done", 2, "p", "b", _member("m9", group="done")), "group_id"),
        ]:
            with pytest.raises(BadRequest) as e:
                col.join(*args)
            assert e.value.field == field
        other = Member("m0", "rewards", "another-body", datetime.now(timezone.utc), None, "g")
        with pytest.raises(BadRequest) as e:
            col.join("g", 2, "p", "z", other)
        assert e.value.field == "request_id" and len(col.open["g"].members) == 1
        with pytest.raises(TooManyGroups):
            col.join("h", 2, "p", "a", _member("n0", group="h"))

    _run(main())


def test_an_incomplete_group_fails_every_member_after_the_timeout():
    async def main():
        timed_out = []
        col = GroupCollector(lambda g: None, timeout_s=0.05, max_open=4, on_timeout=timed_out.append)
        f = col.join("g", 3, "p", "a", _member("m0", group="g"))
        with pytest.raises(GroupIncomplete, match="1 of 3"):
            await f
        assert [g.group_id for g in timed_out] == ["g"] and not col.open
        # forgotten: the same ids may form the group again
        col.join("g", 3, "p", "a", _member("m0", group="g"))
        assert len(col.open["g"].members) == 1

    _run(main())


# -- scoring and batching ------------------------------------------------------------------------------------------


def test_a_sets_order_shown_to_the_generator_does_not_depend_on_its_batch():
    job = SetJob("set:a", "Name a fruit.", ("apple", "rock", "pear", "banana"), 1, 7, [_member("a")])
    others = [SetJob(f"set:{i}", f"Prompt {i}", ("x", "y", "z"), 1, 7, [_member(str(i))]) for i in range(3)]
    alone = score_jobs(_engine(), _engine(), [job])[0]
    mixed = score_jobs(_engine(), _engine(), [*others, job])[-1]
    assert alone.rubrics[0].generation.permutation == mixed.rubrics[0].generation.permutation
    assert alone.rubrics[0].scores == mixed.rubrics[0].scores


def test_score_jobs_makes_one_verification_call_per_batch_and_one_generation_per_seed_set():
    gen, ver = _engine(), _engine()
    jobs = [SetJob(f"set:{i}", f"P{i}", ("a", "b"), 1 + (i % 2), 0, [_member(str(i))]) for i in range(4)]
    scored = score_jobs(gen, ver, jobs)
    assert len(gen.calls) == 2 and len(ver.calls) == 1  # rollouts 1 and 2: two seed lists
    assert [len(s.rubrics) for s in scored] == [1, 2, 1, 2]


def test_set_ids_are_stable_non_negative_int64():
    assert set_id_of("group:g1") == set_id_of("group:g1") != set_id_of("group:g2")
    assert 0 <= set_id_of("x") < 2**63


def test_a_failed_batch_fails_every_future_with_unavailable():
    def boom(jobs):
        from dr_core.engines.base import EngineError

        raise EngineError("server down")

    seen = []
    b = Batcher(boom, lambda s: {}, batch_wait_s=0.0, on_batch=lambda n, s, e: seen.append(e)).start()
    try:
        fut = b.submit(SetJob("set:x", "p", ("a",), 1, 0, [_member("x")]))
        with pytest.raises(Unavailable) as e:
            fut.result(10)
        assert e.value.reason == "engine_failure" and seen == ["engine_failure"]
    finally:
        b.close()
    with pytest.raises(Unavailable):
        b.submit(SetJob("set:y", "p", ("a",), 1, 0, [_member("y")]))


def test_continuous_mode_answers_each_set_when_its_own_work_is_done():
    """A set that finishes while another is still being scored is answered at once; a failing set fails alone."""
    import threading

    release_slow = threading.Event()

    def score(jobs):
        [job] = jobs  # continuous: one set per run
        if job.key == "set:slow":
            assert release_slow.wait(30)
        if job.key == "set:bad":
            raise RuntimeError("bad set")
        return jobs

    def answer(scored):
        return {m.request_id: {"key": j.key} for j in scored for m in j.members}

    sizes = []
    b = Batcher(score, answer, mode="continuous", max_batch_sets=4, on_batch=lambda n, s, e: sizes.append((n, e)))
    b.start()
    try:
        slow = b.submit(SetJob("set:slow", "p", ("a",), 1, 0, [_member("slow")]))
        fast = b.submit(SetJob("set:fast", "p", ("a",), 1, 0, [_member("fast")]))
        bad = b.submit(SetJob("set:bad", "p", ("a",), 1, 0, [_member("bad")]))
        assert fast.result(10) == {"fast": {"key": "set:fast"}}
        with pytest.raises(Unavailable) as e:
            bad.result(10)
        assert e.value.reason == "batch_failure"
        assert not slow.done() and b.busy
        release_slow.set()
        assert slow.result(10) == {"slow": {"key": "set:slow"}}
    finally:
        release_slow.set()
        b.close()
    assert sorted(sizes, key=str) == sorted([(1, None), (1, None), (1, "batch_failure")], key=str)


def test_batcher_mode_is_checked():
    with pytest.raises(ValueError, match="continuous, coalesce"):
        Batcher(lambda j: j, lambda s: {}, mode="eager")


# -- ledger: commit protocol on a real local store -------------------------------------------------------------------


def _scored(keys=("set:a",)):
    jobs = [SetJob(k, "Name a fruit.", ("apple", "rock"), 1, 0, [_member(k.split(":")[1])]) for k in keys]
    return score_jobs(_engine(), _engine(), jobs)


def _commit(led: Ledger, scored, generator: str, verifier: str) -> dict:
    """As the worker does: the answers first (the commit record stores them), then the commit."""
    answered = answer_batch(led.run_id, scored)
    led.commit(scored, answered, generator, verifier)
    return answered


def test_commit_writes_lineage_then_requests_and_a_new_ledger_replays(tmp_path):
    store = Store.from_url(str(tmp_path / "st"))
    led = Ledger(store, "svc").open()
    answered = _commit(led, _scored(), "gen-model", "ver-model")
    assert set(answered) == {"a"} and led.get("a").answer == answered["a"]
    for t in ("samples", "rubrics", "verdicts", "scores", "rewards", "requests"):
        assert len(store.parts(t, run_id="svc", round=0)) == 1, t
    again = Ledger(store, "svc").open()
    assert again.get("a").answer == answered["a"] and again.get("a").fingerprint == "fp-a" and not again.swept


def test_the_ledger_keeps_only_its_recent_answers_in_memory_and_reads_older_ones_back(tmp_path):
    store = Store.from_url(str(tmp_path / "st"))
    led = Ledger(store, "svc", recent_answers=2).open()
    answered = {}
    for k in "abcde":
        answered |= _commit(led, _scored((f"set:{k}",)), "g", "v")
    assert list(led._recent) == ["d", "e"] and len(led) == 5  # every request id known, two answers held
    assert [led.get(k).answer for k in "abcde"] == [answered[k] for k in "abcde"]  # a-c read back from the store
    assert list(led._recent) == ["d", "e"] and led.get("zz") is None
    reopened = Ledger(store, "svc", recent_answers=2).open()
    assert not reopened._recent and reopened.get("a").answer == answered["a"] and reopened.get("a").fingerprint


def test_open_sweeps_batches_that_never_committed(tmp_path, monkeypatch):
    store = Store.from_url(str(tmp_path / "st"))
    led = Ledger(store, "svc").open()
    _commit(led, _scored(("set:a",)), "g", "v")
    monkeypatch.setenv("DR_FAULT", "enospc@store-write:requests")
    with pytest.raises(StoreError, match="No space left"):
        _commit(led, _scored(("set:b",)), "g", "v")
    monkeypatch.delenv("DR_FAULT")
    # the failed commit removed what it wrote; an orphan left by a killed process is swept at the next open
    assert len(store.parts("samples", run_id="svc", round=0)) == 1 and led.get("b") is None
    orphan = store.write(
        "samples",
        [{"stage": "service", "set_id": 9, "prompt_id": "p", "response_idx": 0, "policy_ckpt": "x", "response": "r"}],
        part="b-killed",
        run_id="svc",
        round=0,
    )
    reopened = Ledger(store, "svc").open()
    assert reopened.swept == [orphan] and not store.exists(orphan)
    assert reopened.get("a") is not None and reopened.get("b") is None


# -- metrics and clients ---------------------------------------------------------------------------------------------


def test_metrics_text_has_cumulative_buckets_and_escaped_labels():
    m = Metrics()
    m.observe("dr_request_seconds", 0.07, route="/v1/rewards")
    m.observe("dr_request_seconds", 3.0, route="/v1/rewards")
    m.inc("dr_requests_total", route='/x"y', status="200")
    m.gauge("dr_queue_depth", lambda: 5)
    text = m.render()
    assert 'dr_request_seconds_bucket{le="0.1",route="/v1/rewards"} 1' in text
    assert 'dr_request_seconds_bucket{le="5",route="/v1/rewards"} 2' in text
    assert 'dr_request_seconds_bucket{le="+Inf",route="/v1/rewards"} 2' in text
    assert 'dr_requests_total{route="/x\\"y",status="200"} 1' in text and "dr_queue_depth 5" in text
    assert "dr_engine_failures_total 0" in text


def test_client_groups_and_texts():
    assert clients.group_blocks(["b", "a", "b", "a"]) == {"b": [0, 2], "a": [1, 3]}
    assert clients._text([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]) == "q"
    assert clients._text([{"role": "assistant", "content": "an answer"}]) == "an answer"
    assert [f["score"] for f in clients._fill([0.5, None, 1.0])] == [0.5, 0.75, 1.0]
    assert clients._fill([None, None])[0] == {"score": 0.0, "dr_unscorable": 1.0}
    with pytest.raises(ValueError, match="group_size"):
        clients.DynamicRubricReward("http://127.0.0.1:1", mode="members")


def test_the_clients_load_only_httpx():
    """A trainer machine needs httpx and clients.py only: importing it loads no other part of the project."""
    import subprocess
    import sys

    code = (
        "import sys, dr_core.service.clients\n"
        "mods = {m.split('.')[0] for m in sys.modules} | {m for m in sys.modules if m.startswith('dr_core')}\n"
        "print(' '.join(sorted(mods)))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    # clients.fill_unscorable is the service's answers.fill_unscorable, its error's base dr_core.errors.DRError:
    # modules of the standard library only
    assert {m for m in loaded if m.startswith("dr_core.")} == {
        "dr_core.errors",
        "dr_core.service",
        "dr_core.service.clients",
        "dr_core.service.answers",
    }
    assert not loaded & {"torch", "trl", "vllm", "pydantic", "numpy", "fastapi", "pyarrow"}


def test_the_client_file_alone_fills_unscorable_rewards_as_the_service_does(tmp_path):
    """verl loads dr_core/service/clients.py by path on a trainer machine that may not have dr_core: the file
    alone imports (httpx only) and its fallback ``fill_unscorable`` gives the service's answers."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from dr_core.service.answers import fill_unscorable

    alone = tmp_path / "clients.py"
    shutil.copy(Path(__file__).resolve().parents[2] / "dr_core" / "service" / "clients.py", alone)
    cases = [[1.0, None, 0.5], [None, None], [0.25], []]
    code = (
        "import importlib.util, json, sys\n"
        "sys.modules['dr_core'] = None  # a trainer machine without the package: importing it fails\n"
        f"spec = importlib.util.spec_from_file_location('c', {str(alone)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert not any(k.startswith('dr_core.') for k in sys.modules)\n"
        f"print(json.dumps([m.fill_unscorable(c) for c in {cases!r}]))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [list(map(list, fill_unscorable(c))) for c in cases]


def test_an_answer_read_back_brings_its_whole_batch_back_in_one_read(tmp_path, monkeypatch):
    store = Store.from_url(str(tmp_path / "st"))
    led = Ledger(store, "svc", recent_answers=3).open()
    both = _commit(led, _scored(("set:x", "set:y")), "g", "v")
    for k in "abc":
        _commit(led, _scored((f"set:{k}",)), "g", "v")
    reads = []
    monkeypatch.setattr(store, "read", lambda uri, _read=store.read: reads.append(uri) or _read(uri))
    assert [led.get("x").answer, led.get("y").answer] == [both["x"], both["y"]] and len(reads) == 1
