"""``dr serve`` as a NeMo Gym resources server, against the real nemo-gym 0.4.0: a real ``dr serve`` (127.0.0.1, a
real store, its engines the scripted OpenAI-compatible server) and a script run by nemo-gym's own Python 3.12
environment (tests/support/nemo_gym_client.py) that builds its requests with nemo-gym's models, posts them to
``/seed_session`` and ``/verify`` and parses the answers with nemo-gym's ``BaseVerifyResponse``.

- every rollout of a group (same prompt, same ``_ng_task_index``, ``--group-size`` 3) gets the reward of one scoring
  of the whole set: the same set id for all, one rubric for it in the store, and rewards equal to
  ``/v1/score-set``'s scores for that prompt and those responses in the order the group was collected (seed 0, as
  ``/v1/rewards``);
- a rollout sent twice while its group is open is answered once (same request id, same reward);
- the same task again (NeMo Gym's next epoch) opens a new group, scored as a new set;
- a group that never fills gets 504 ``group_incomplete`` in the service's error shape; a bad body 422 naming the
  field; the row's extra fields come back in the answer; a refused request writes nothing.

nemo-gym needs Python 3.12: without ``.venv-nemo-gym`` the test fails and names the command that installs it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from dr_core.store.artifacts import Store
from tests.support.scripted_server import ScriptedServer
from tests.support.serve_proc import ROOT, ServeProcess, engines_file

VENV_PYTHON = ROOT / ".venv-nemo-gym" / "bin" / "python"
CLIENT = ROOT / "tests" / "support" / "nemo_gym_client.py"
INSTALL = "bash infra/nemo-gym/install.sh"
GROUP_SIZE, GROUP_TIMEOUT_S = 3, 8

PROMPT_A = "Explain why the sky is blue in two sentences."
PROMPT_B = "Give one reason to write unit tests."
PLAN_GROUPS = [
    [
        {
            "name": "a",
            "prompt": PROMPT_A,
            "task_index": 0,
            "answers": ["Rayleigh scattering.", "Blue light scatters more.", "It reflects the sea."],
        },
        {
            "name": "b",
            "prompt": PROMPT_B,
            "task_index": 1,
            "answers": ["They catch bugs early.", "Because.", "They document behaviour."],
            "duplicate_first": True,
        },
    ],
    [  # NeMo Gym's next epoch: task 0 again, new rollouts
        {
            "name": "a2",
            "prompt": PROMPT_A,
            "task_index": 0,
            "answers": ["Short wavelengths scatter.", "No idea.", "Sunlight scatters off air molecules."],
        }
    ],
]


FORWARDED = {  # through infra/nemo-gym/resources_servers/dynamicrubric (the docs' recipe), no task index
    "name": "fwd",
    "prompt": "Name a prime number and say why it is prime.",
    "answers": ["7: only 1 and 7 divide it.", "9.", "2, the only even prime."],
}


@pytest.fixture(scope="module")
def nemo_gym_python() -> Path:
    if not VENV_PYTHON.exists():
        pytest.fail(f"nemo-gym's Python 3.12 environment is missing ({VENV_PYTHON}); install it with: {INSTALL}")
    check = subprocess.run(
        [str(VENV_PYTHON), "-c", "import nemo_gym.base_resources_server, sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        pytest.fail(f"nemo-gym does not import in {VENV_PYTHON} ({check.stderr.strip()[-300:]}); run: {INSTALL}")
    return VENV_PYTHON


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("nemo-gym")
    with ScriptedServer() as scripted:
        srv = ServeProcess(
            work,
            store=work / "store",
            engines=engines_file(work / "engines.yaml", scripted.base_url),
            args=("--group-size", str(GROUP_SIZE), "--group-timeout", str(GROUP_TIMEOUT_S)),
        )
        with srv:
            yield srv


@pytest.fixture(scope="module")
def gym(nemo_gym_python, served, tmp_path_factory) -> dict:
    plan = {
        "url": served.url,
        "groups": PLAN_GROUPS,
        "incomplete": {"prompt": "Nobody else answers this.", "answer": "Alone."},
        "bad": True,
        "forwarded": FORWARDED,
    }
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(plan))
    started = time.monotonic()
    run = subprocess.run([str(nemo_gym_python), str(CLIENT), str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stderr[-3000:], served.logs()[-3000:])
    out = json.loads(run.stdout)
    out["seconds"] = time.monotonic() - started
    return out


def _requests_rows(served) -> list[dict]:
    return Store.from_url(str(served.store)).read_table("requests", run_id="service", round=0).to_pylist()


def test_seed_session_answers_nemo_gyms_empty_response(gym):
    assert gym["seed_session"] == {"status": 200, "json": {}}


@pytest.mark.parametrize("name", ["a", "b", "a2", "fwd"])
def test_each_group_is_scored_once_as_a_set_with_score_sets_scores(gym, served, name):
    answers = gym["groups"][name]
    assert all(a["status"] == 200 and "model_error" not in a for a in answers), answers
    assert all(a["echo_equal"] for a in answers), answers
    set_ids = {a["json"]["set_id"] for a in answers}
    assert len(set_ids) == 1, answers  # one set for the whole group
    (set_id,) = set_ids
    rows = {r["request_id"]: r for r in _requests_rows(served) if r["set_id"] == set_id}
    assert len(rows) == GROUP_SIZE and {r["route"] for r in rows.values()} == {"verify"}, rows
    by_idx = sorted(rows.values(), key=lambda r: r["response_idx"])
    assert [r["response_idx"] for r in by_idx] == list(range(GROUP_SIZE))
    store = Store.from_url(str(served.store))
    rubric_rows = [
        r for r in store.read_table("rubrics", run_id="service", round=0).to_pylist() if r["set_id"] == set_id
    ]
    assert {r["rollout"] for r in rubric_rows} == {0}, rubric_rows  # one rubric: the set was scored once
    samples = [r for r in store.read_table("samples", run_id="service", round=0).to_pylist() if r["set_id"] == set_id]
    texts = [s["response"] for s in sorted(samples, key=lambda s: s["response_idx"])]
    group = next(g for batch in [*PLAN_GROUPS, [FORWARDED]] for g in batch if g["name"] == name)
    assert sorted(texts) == sorted(group["answers"])  # the answer text came out of the Responses API output
    reward_of = {a["json"]["request_id"]: a["reward"] for a in answers}
    with httpx.Client(base_url=served.url, timeout=120) as c:
        ref = c.post("/v1/score-set", json={"prompt": group["prompt"], "responses": texts, "seed": 0})
    assert ref.status_code == 200, ref.text
    assert [reward_of[r["request_id"]] for r in by_idx] == ref.json()["scores"]
    assert len(set(ref.json()["scores"])) > 1  # scripted verdicts differ: the equality says something


def test_the_rows_extra_fields_come_back_with_the_services_own(gym):
    a = gym["groups"]["a"][0]
    extra = a["extra"]
    assert extra["_ng_task_index"] == 0 and extra["_ng_rollout_index"] == a["member"]
    assert extra["expected_answer"] == "n/a" and extra["dataset_row"] == {"source": "test", "k": a["member"]}
    assert extra["request_id"].startswith("nemo-gym-t0-") and extra["group_id"].startswith("nemo-gym-t0-")
    assert extra["unscorable"] == [] and extra["rubric_id"] == f"service:{extra['set_id']}"


def test_a_rollout_sent_twice_while_its_group_is_open_is_answered_once(gym):
    b = gym["groups"]["b"]
    first, again = b[0], b[1]
    assert first["member"] == again["member"] == 0
    assert first["json"]["request_id"] == again["json"]["request_id"] and first["reward"] == again["reward"]
    assert len({x["json"]["request_id"] for x in b}) == GROUP_SIZE


def test_the_same_task_next_epoch_is_a_new_group_and_a_new_set(gym):
    first = {x["json"]["group_id"] for x in gym["groups"]["a"]}
    second = {x["json"]["group_id"] for x in gym["groups"]["a2"]}
    assert len(first) == len(second) == 1 and first != second
    assert gym["groups"]["a"][0]["json"]["set_id"] != gym["groups"]["a2"][0]["json"]["set_id"]


def test_an_incomplete_group_times_out_with_group_incomplete(gym, served):
    inc = gym["incomplete"]
    assert inc["status"] == 504, inc
    assert set(inc["json"]) == {"error", "detail", "field"} and inc["json"]["error"] == "group_incomplete"
    assert f"1 of {GROUP_SIZE} members" in inc["json"]["detail"]
    assert not [r for r in _requests_rows(served) if r["prompt"] == "Nobody else answers this."]


@pytest.mark.parametrize(
    "case, field",
    [
        ("no_response", "response"),
        ("wrong_input", "responses_create_params.input"),
        ("no_text", "responses_create_params.input"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(gym, served, case, field):
    bad = gym["bad"][case]
    assert bad["status"] == 422, bad
    assert bad["json"]["error"] == "invalid_request" and bad["json"]["field"] == field, bad
    assert not [r for r in _requests_rows(served) if r["prompt"] == "bad"]
