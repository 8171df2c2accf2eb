"""The integration half of tests/unit/test_engines_endpoints.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import base64
import json
import logging
import threading

import pytest

from dr_core.engines import EngineError
from dr_core.evaluator.generate import generate_rubrics
from dr_core.evaluator.items import Check, EvalItem, StageStats
from dr_core.evaluator.verify import verify
from tests.support.netutil import free_port, free_ports, wait_until
from tests.support.scripted_server import MODEL, ScriptedServer
from tests.unit import test_engines_endpoints as unit_half
from tests.unit.test_engines_endpoints import PW, Front, Held, conv, engine, expected

# fixtures of the unit half that the tests here ask for by name
clock = unit_half.clock
slept = unit_half.slept


# -- balancing ------------------------------------------------------------------------------------------------------
def test_requests_go_to_the_endpoint_with_fewest_outstanding():
    """A holds the first 2 requests it gets (concurrency 2 per endpoint): while it has 2 outstanding and B at most 1,
    every other request goes to B; round robin would have sent A half of them."""
    n = 12
    with Held(hold=2) as a, ScriptedServer() as b, engine([a.base_url, b.base_url]) as eng:
        out: list = []
        worker = threading.Thread(target=lambda: out.extend(eng.chat([conv(i) for i in range(n)])))
        worker.start()
        try:
            wait_until(
                lambda: eng.endpoint_stats()[b.base_url]["answered"] == n - a.held,
                timeout=30,
                what="B to answer every request that A does not hold",
            )
            stats = eng.endpoint_stats()
            assert stats[a.base_url]["requests"] == a.held and 1 <= a.held <= 2  # nothing more while A was busier
        finally:
            a.release()
            worker.join(30)
        stats = eng.endpoint_stats()
    assert [c.texts[0] for c in out] == [expected(b, i) for i in range(n)]  # one answer each, in order
    assert stats[a.base_url]["answered"] + stats[b.base_url]["answered"] == n
    assert b.counts["requests"] == n - a.held and a.counts["requests"] == a.held


def test_equally_loaded_endpoints_take_turns():
    with ScriptedServer() as a, ScriptedServer() as b, engine([a.base_url, b.base_url]) as eng:
        for i in range(6):  # one at a time: always a tie
            eng.chat([conv(i)])
    assert a.counts["requests"] == b.counts["requests"] == 3


def test_an_endpoint_takes_concurrency_requests_at_most_also_when_the_others_are_down():
    """A is refused, B holds what it gets: B gets 2 (concurrency), and the other 2 worker threads wait for a place
    instead of piling onto B."""

    class Watched(threading.Condition):
        waiting = 0

        def wait(self, timeout=None):
            self.waiting += 1
            try:
                return super().wait(timeout)
            finally:
                self.waiting -= 1

    dead = f"http://127.0.0.1:{free_port()}/v1"
    with Held(hold=100) as b, engine([dead, b.base_url]) as eng:
        eng._lock = Watched()
        out: list = []
        worker = threading.Thread(target=lambda: out.extend(eng.chat([conv(i) for i in range(6)])))
        worker.start()
        try:
            wait_until(
                lambda: b.held == 2 and eng._lock.waiting == 2,
                timeout=30,
                what="B to hold 2 requests and 2 more to wait for a place",
            )
            assert b.held == 2 and eng.endpoint_stats()[b.base_url]["requests"] == 2
        finally:
            b.release()
            worker.join(30)
        stats = eng.endpoint_stats()
    assert [c.texts[0] for c in out] == [expected(b, i) for i in range(6)]
    assert stats[b.base_url]["answered"] == 6 and stats[dead]["marked_down"] == 1


# -- failover -------------------------------------------------------------------------------------------------------
def test_a_refusing_endpoint_is_marked_down_and_its_requests_move_without_spending_attempts(slept, caplog):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with (
        ScriptedServer() as b,
        engine([dead, b.base_url], attempts=1) as eng,
        caplog.at_level(logging.WARNING, logger="dr_core.engines.openai_http"),
    ):
        out = eng.chat([conv(i) for i in range(8)])
        stats = eng.endpoint_stats()
    assert [c.texts[0] for c in out] == [expected(b, i) for i in range(8)]
    assert slept == []  # attempts=1: a move that spent it would have failed the request
    assert stats[dead]["marked_down"] == 1 and stats[dead]["down"] and stats[dead]["answered"] == 0
    assert stats[dead]["moved"] == stats[dead]["failures"] == stats[dead]["requests"] >= 1
    assert stats[b.base_url] | {"requests": 0} == {
        "requests": 0,
        "answered": 8,
        "failures": 0,
        "marked_down": 0,
        "moved": 0,
        "down": False,
    }
    warnings = [r.getMessage() for r in caplog.records if "marked down" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"{dead} marked down (ConnectError")


def test_an_endpoint_that_drops_connections_is_marked_down(slept):
    with Front(drop=True) as dropper, ScriptedServer() as b, engine([dropper.base_url, b.base_url]) as eng:
        out = eng.chat([conv(i) for i in range(6)])
        stats = eng.endpoint_stats()
    assert [c.texts[0] for c in out] == [expected(b, i) for i in range(6)] and slept == []
    assert stats[dropper.base_url]["marked_down"] == 1 and stats[dropper.base_url]["moved"] == len(dropper.log) >= 1


def test_a_5xx_spends_an_attempt_and_the_retry_goes_to_another_endpoint(slept):
    with ScriptedServer() as a, ScriptedServer() as b, engine([a.base_url, b.base_url]) as eng:
        a.fail_next(1, status=503)
        (c,) = eng.chat([conv(0)])  # the first request goes to A (a tie, lowest index first)
        stats = eng.endpoint_stats()
    assert c.texts[0] == expected(b, 0) and slept == [0.01]
    assert stats[a.base_url] | {"down": None} == {
        "requests": 1,
        "answered": 0,
        "failures": 1,
        "marked_down": 0,
        "moved": 1,
        "down": None,
    }  # a 5xx is an answer: A stays up
    assert stats[b.base_url]["answered"] == 1


def test_a_down_endpoint_is_probed_after_its_cooldown_and_comes_back(clock, caplog):
    with (
        ScriptedServer() as backend,
        Front(backend.base_url, drop=True) as a,
        ScriptedServer() as b,
        engine([a.base_url, b.base_url], endpoint_cooldown_s=30) as eng,
        caplog.at_level(logging.WARNING, logger="dr_core.engines.openai_http"),
    ):
        eng.chat([conv(0)])
        assert eng.endpoint_stats()[a.base_url]["down"]
        before = len(a.log)
        eng.chat([conv(i) for i in range(4)])
        assert len(a.log) == before  # inside the cool-down nothing is sent to A
        clock.now += 31
        eng.chat([conv(1)])  # A still drops: the probe fails, the request moves on, A is down for another 30 s
        assert len(a.log) == before + 1 and eng.endpoint_stats()[a.base_url]["down"]
        eng.chat([conv(i) for i in range(4)])
        assert len(a.log) == before + 1
        a.drop = False
        clock.now += 31
        eng.chat([conv(i) for i in range(4)])
        stats = eng.endpoint_stats()
    assert not stats[a.base_url]["down"] and stats[a.base_url]["answered"] >= 1
    assert stats[a.base_url]["marked_down"] == 1  # a failed probe is not a new going-down
    messages = [r.getMessage() for r in caplog.records]
    assert sum("marked down" in m for m in messages) == 1 and any(
        m.startswith(f"{a.base_url} is back up") for m in messages
    )


def test_credentials_go_to_every_endpoint():
    basic = "Basic " + base64.b64encode(f"u:{PW}".encode()).decode()
    with ScriptedServer(auth={basic}) as a, ScriptedServer(auth={basic}) as b:
        creds = [u.replace("http://", f"http://u:{PW}@") for u in (a.base_url, b.base_url)]
        with engine(creds, model="default") as eng:
            eng.chat([conv(i) for i in range(4)])
            assert eng.model_name == MODEL and PW not in repr(eng) + json.dumps(eng.endpoint_stats())
    assert a.auth_headers == b.auth_headers == {basic}
    assert a.counts["requests"] + b.counts["requests"] == 4 and not a.counts["unauthorized"]


# -- GET /models ----------------------------------------------------------------------------------------------------
def test_model_default_asks_every_endpoint():
    with ScriptedServer() as a, ScriptedServer() as b, engine([a.base_url, b.base_url], model="default") as eng:
        assert eng.model_name == MODEL
    assert a.counts["models"] == b.counts["models"] == 1


def test_endpoints_serving_different_models_are_an_error():
    with ScriptedServer(model="x") as a, ScriptedServer(model="y") as b:
        with pytest.raises(EngineError) as err:
            engine([a.base_url, b.base_url], model="default")
    assert str(err.value) == (
        f"the endpoints of base_url serve different models: {a.base_url} serves ['x'], "
        f"{b.base_url} serves ['y']: every endpoint must serve the same one model"
    )


def test_an_unreachable_endpoint_is_left_out_of_the_model_listing(slept):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ScriptedServer() as b, engine([dead, b.base_url], model="default") as eng:
        assert eng.model_name == MODEL and eng.endpoint_stats()[dead]["down"] and slept == []
        eng.chat([conv(0)])
    dead2 = [f"http://127.0.0.1:{p}/v1" for p in free_ports(2)]
    with pytest.raises(EngineError) as err:
        engine(dead2, model="default")
    assert all(f"{u} (down: ConnectError" in str(err.value) for u in dead2)


# -- the counts in the stages' costs ----------------------------------------------------------------------------------
def test_verification_and_generation_costs_carry_the_endpoint_counts():
    checks = [Check("p", f"response {i}", f"criterion {j}") for i in range(3) for j in range(4)]
    with Front(drop=True) as dropper, ScriptedServer() as b, engine([dropper.base_url, b.base_url]) as eng:
        verdicts, stats = verify(eng, checks + checks[:2])  # 2 repeats: asked once
        cost = stats.as_dict()
        assert len(verdicts) == 14 and all(v in (0, 1) for v in verdicts)
        assert cost["requests"] == 12 and cost["endpoints_down"] == 1 and cost["requests_moved"] >= 1
        assert cost["endpoints"][b.base_url]["answered"] == 12 and cost["endpoints"][dropper.base_url]["down"]
        assert cost["requests_moved"] == cost["endpoints"][dropper.base_url]["moved"]
        # the next stage counts its own call only: the endpoint is already down, nothing moves
        _, gen = generate_rubrics(eng, [EvalItem("p", ("a", "b"))], [0, 1])
        cost = gen.as_dict()
        assert cost["endpoints_down"] == cost["requests_moved"] == 0
        assert cost["endpoints"][b.base_url]["answered"] == 2 and cost["endpoints"][dropper.base_url]["down"]
    merged = StageStats()
    merged.merge(stats)
    merged.merge(gen)  # several calls of one stage (the service's batches): the endpoint counts add up too
    assert merged.requests == 12 + 2
    total = merged.as_dict()
    assert total["endpoints_down"] == 1 and total["endpoints"][b.base_url]["answered"] == 14
