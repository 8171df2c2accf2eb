"""Evaluate the example verifiers environment (examples/verifiers_env, ``dr-rubric-env``) with verifiers' own eval
runner, in the verifiers environment (.venv-verifiers, infra/verifiers/install.sh), and print what each episode
got as JSON. tests/integration/test_verifiers_env.py runs it against a scripted policy server and a real dr serve:

    .venv-verifiers/bin/python -m tests.support.verifiers_eval --policy-url URL --dr-url URL --n 3 --out DIR

Each printed episode: ``{task_id, prompt, ok, errors, traces: [{reply, reward, ok, errors, stop}]}``, traces in
the order the env sent them to the service (``reward`` None: not recorded, as verifiers leaves a failed reward).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

from dr_core.integrations.verifiers import REWARD_NAME


def _trace(t) -> dict:
    r = t.rewards.get(REWARD_NAME)
    return {
        "reply": t.last_reply,
        "reward": None if r is None else r.score,
        "ok": t.ok,
        "errors": [f"{e.type}: {e.message}" for e in t.errors],
        "stop": t.stop_condition,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy-url", required=True)
    ap.add_argument("--dr-url", required=True)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rubric-rollouts", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("DR_TEST_POLICY_KEY", "test-key")
    config = EvalConfig(
        env={
            "taskset": {"id": "dr-rubric-env"},
            "n": args.n,
            "dr_url": args.dr_url,
            "seed": args.seed,
            "rubric_rollouts": args.rubric_rollouts,
        },
        model="scripted-model",
        client={"type": "eval", "base_url": args.policy_url, "api_key_var": "DR_TEST_POLICY_KEY"},
        push=False,
        rich=None,
        output_dir=args.out,
    )
    episodes = asyncio.run(run_eval(config))
    out = [
        {
            "task_id": e.task.data.id,
            "prompt": e.task.data.prompt_text,
            "ok": e.ok,
            "errors": [f"{x.type}: {x.message}" for x in e.errors],
            "traces": [_trace(t) for t in e.traces],
        }
        for e in episodes
    ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
