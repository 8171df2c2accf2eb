"""The random-kill campaign in miniature (infra/benchmarks/chaos.py runs 30+ cases; the harness is
tests/support/chaos.py): a two-round ``dr coevolve`` on scripted engines, G(0) = P(0) = the tiny random Llama.

- A kill at a named point (``DR_FAULT=kill@verify:measure#1``: inside round 1's verify step, after the steps before
  it finished) shows the crash-proof step log: the killed execution's finished steps are in the ``steps`` table,
  its verify is Running, the resume marks it Interrupted, serves the finished steps from the cache and completes
  verify.
- A kill at a moment drawn from a seeded generator, and a second one in the resumed execution, as the campaign does
  (in 5 of its 30 runs).

After each resume every table equals the uninterrupted run's (0 rows lost, 0 duplicated), and no temp file is left.
Whatever moment the random kills strike, these must hold; which step they interrupt is only reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.chaos import RUN_ID, Case, Chaos, draw_kills, step_rows
from tests.support.fixtures_prefect import prefect_server

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def chaos(tmp_path_factory, tiny_llama_dir):
    from tests.support.scripted_server import ScriptedServer

    root = tmp_path_factory.mktemp("chaos")
    with ScriptedServer() as scripted, prefect_server(root / "prefect-server") as api:
        engines = root / "engines.json"
        role = {"kind": "openai_http", "base_url": scripted.base_url, "model": "default", "verdict_mode": "choice"}
        engines.write_text(json.dumps({r: role for r in ("generator", "verifier", "policy")}))
        c = Chaos(root, engines, api, Path(tiny_llama_dir))
        c.make_reference()
        yield c


def _assert_clean(outcome: dict) -> None:
    assert outcome["rc"] == 0, outcome.get("error")
    assert (outcome["lost"], outcome["duplicated"], outcome["left"]) == (0, 0, []), outcome
    assert outcome["tables_equal"], outcome
    assert outcome["cache_all"], f"finished steps the resume did not serve from the cache: {outcome['cache']}"
    assert outcome["log_ok"], outcome


def test_a_kill_inside_a_step_leaves_a_step_log_the_resume_completes(chaos):
    d = chaos.root / "named"
    case = Case(name="named", kill_times=[])
    killed = chaos.execute(d, None, "killed", DR_FAULT="kill@verify:measure#1")
    assert killed.killed, (d / "killed.log").read_text()[-3000:]
    before = step_rows(str(d / "store"))
    assert {r["execution"] for r in before} and len({r["execution"] for r in before}) == 1
    states = {r["step"]: r["state"] for r in before}
    assert states["r1/verify/shard-0"] == "Running"  # written when the step started; its process died in it
    finished = {s for s, v in states.items() if v == "Completed"}
    assert {"select-inputs", "r1/train-generator", "r1/train-policy", "r1/generate-rubrics"} <= finished, states

    case.executions.append(killed)
    final = chaos.execute(d, None, "resume")
    case.executions.append(final)
    outcome = chaos.compare(d, case, final)
    _assert_clean(outcome)
    assert outcome["died_in"] == ["r1/verify/shard-0"]
    rows = step_rows(str(d / "store"))
    resumed = {r["step"]: r["state"] for r in rows if r["execution"] not in {b["execution"] for b in before}}
    assert resumed["r1/verify/shard-0"] == "Completed"
    assert all(resumed[s] == "Cached" for s in finished & set(chaos.reference["cacheable"])), resumed
    assert {r["run_id"] for r in rows} == {RUN_ID}


def test_random_kills_lose_duplicate_and_leave_nothing(chaos):
    [kills] = draw_kills(seed=7, n_runs=1, twice=1, run_seconds=chaos.reference["seconds"])
    assert len(kills) == 2  # the run, then its resumed execution
    case = chaos.run_case("twice", kills)
    print("kills at", kills, "->", case.outcome)
    _assert_clean(case.outcome)
