"""One co-evolution round on the real default model, in-process on the session engine: the generator is trained,
then the policy, both checkpoints are registered with their parents, training rollouts are in the store, and a
re-run of the finished round does no training."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def micro_coevolve(test_engine_config):
    from dr_core.config import EnginesConfig
    from dr_core.presets import coevolve_preset

    eng = test_engine_config.model_dump()
    return coevolve_preset(
        "tiny",
        round={"n_prompts": 2, "k": 2, "n_anchor": 3, "eval_limit": 2, "policy_max_tokens": 24,
               "generator_max_tokens": 160, "engines": EnginesConfig(generator=eng, verifier=eng, policy=eng).model_dump()},
        generator={"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2,
                   "gradient_accumulation_steps": 1, "max_completion_length": 48},
        policy={"max_steps": 1, "max_completion_length": 24, "rubric_max_tokens": 160},
        measure_start=False,
    )


def test_one_round_trains_both_and_rerun_does_no_training(prefect_harness, micro_coevolve, tmp_path):
    from dr_core.store import checkpoints
    from dr_core.store import sql
    from dr_core.store.artifacts import Store
    from flows.coevolve import CoevolveParams, coevolve_flow

    from dr_core.paths import cache_dir

    def scratch_dirs():
        return {p for role in ("generator", "policy") for p in (cache_dir() / "train" / role).glob("*")}

    store = str(tmp_path / "store")
    params = CoevolveParams(config=micro_coevolve, store=store, run_id="co")
    before = scratch_dirs()
    first = coevolve_flow(params)
    assert scratch_dirs() <= before  # each update's TRL scratch dir is dropped once its checkpoint is in the store
    (r1,) = first["rounds"]
    assert first["steps"]["r1/train-generator"]["state"] == "Completed"
    assert first["steps"]["r1/train-policy"]["state"] == "Completed"
    s = Store.from_url(store)
    gen, pol = checkpoints.latest(s, "co", "generator"), checkpoints.latest(s, "co", "policy")
    assert gen["round"] == 1 and gen["parent"] == "default" and gen["uri"] == r1["generator"]
    assert pol["round"] == 1 and pol["parent"] == "default"
    assert (checkpoints.materialise(s, pol["uri"]) / "config.json").is_file()
    con = s.connect()
    # every generator rollout is recorded with its rewards (NULL when its rubric could not be used)
    n_rollouts = r1["generator_update"]["rollouts"]
    assert con.sql("SELECT count(*) FROM rewards WHERE stage = 'generator'").fetchall() == [(n_rollouts,)]
    assert con.sql("SELECT count(*) FROM samples WHERE stage = 'policy'").fetchall() == [(r1["policy_update"]["rollouts"],)]
    n_policy = r1["policy_update"]["rollouts"]
    assert con.sql("SELECT count(*) FROM rewards WHERE stage = 'policy'").fetchall() == [(n_policy,)]
    # the summary's zero-std GRPO groups per step are what sql/training_signal finds in the stored rollouts
    signal = sql.run(con, "training_signal", {"run_id": "co"}).to_pylist()
    for role in ("generator", "policy"):
        u = r1[f"{role}_update"]
        want = [(st["step"], st["groups"], st["zero_std_groups"]) for st in u["zero_std_by_step"]]
        assert want and [(r["step"], r["groups"], r["zero_std_groups"]) for r in signal if r["stage"] == role] == want
        assert u["no_gradient_steps"] == sum(st["zero_std_groups"] == st["groups"] for st in u["zero_std_by_step"])
    assert {"verifier_yes_rate", "verdicts_scored", "constant_score_sets_share"} <= set(r1["measure"])
    assert isinstance(first["warnings"], list) and all(isinstance(w, str) for w in first["warnings"])
    assert con.sql("SELECT count(*) FROM samples WHERE stage = 'measure' AND round = 1").fetchall() == [(4,)]
    # every step of the flow is in the steps table, under round 1 (no round-0 measurement here)
    assert dict(con.sql("SELECT step, round FROM steps").fetchall()) == {name: 1 for name in first["steps"]}

    again = coevolve_flow(params)
    assert again["steps"]["r1/train-generator"]["state"] == "Cached"
    assert again["steps"]["r1/train-policy"]["state"] == "Cached"
    assert again["rounds"][0]["generator"] == r1["generator"]
