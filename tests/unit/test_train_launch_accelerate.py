"""The launched GRPO update for real (dr_core/train/multi.py through tasks/train.py).

1. The policy-update task with ``launch: {num_processes: 2, config_file: infra/accelerate/zero2.yaml}``: accelerate
   starts two CPU ranks (DeepSpeed ZeRO-2, gloo) training the tiny random Llama, each rank's rewards from
   ``openai_http`` engines on the scripted OpenAI-compatible server (behind a bearer key that only ``api_key_env``
   hands the ranks). The ranks' records come back into the task's rollout tables whole group by whole group, the
   checkpoint is complete, and the tables and the returned reference have the shape of the same update in-process.
2. A two-machine pdsh launch as far as this machine can take it: accelerate 1.15's real DeepSpeed path with a
   stand-in ``deepspeed`` script first on PATH, which records the command and the environment file it was handed.

The first DeepSpeed run of a session builds its shared-memory op into the cache (``launch.extensions_dir``; shared
with tests/integration/test_grpo_deepspeed.py). Measured on a busy 2-core machine: test 1 58-77 s (the two-rank launch
about
64 s of it, mostly start-up: a GRPO step is about 1 s; the in-process reference about 13 s), test 2 about 2.5 s.

    .venv/bin/python -m pytest -q tests/unit/test_train_launch_accelerate.py
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from dr_core.config import EngineConfig
from dr_core.config.training import GRPOSettings, LaunchSettings
from dr_core.train import multi
from dr_core.train.grpo import GeneratorRow

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "DR_TEST_LAUNCH_KEY"
TABLES = ("samples", "rubrics", "verdicts", "scores", "rewards")


def _policy_update(
    tiny: Path, store_dir: Path, base_url: str, launch: dict | None, per_device: int, keep: bool
) -> tuple[dict, dict[str, list[dict]]]:
    """P(0) -> P(1) through the real task body: 2 prompts, K = 2, 2 GRPO steps of 2 groups each; returns the task's
    reference and the rollout tables it stored."""
    from dr_core.config import coevolve_preset
    from dr_core.runs.refs import CheckpointRef, StepContext
    from dr_core.store import checkpoints
    from dr_core.store.artifacts import Store
    from tasks import train
    from tasks.runtime import write_ref

    s = Store.from_url(str(store_dir))
    base = CheckpointRef(uri=checkpoints.save(s, tiny, "start", 0, "policy"), fingerprint="tiny-policy")
    gen = CheckpointRef(uri=checkpoints.save(s, tiny, "start", 0, "generator"), fingerprint="tiny-generator")
    rows = [
        {"dataset": "launch", "prompt_id": f"p{i}", "prompt": q, "baseline": None}
        for i, q in enumerate(["Name a fruit.", "Say hi."])
    ]
    prompts = write_ref(s, "prompts", rows, "selected", dataset="launch")
    http = {"kind": "openai_http", "model": "scripted-model", "base_url": base_url, "api_key_env": KEY_ENV}
    cfg = coevolve_preset(
        "tiny",
        round={"k": 2, "n_prompts": 2, "engines": {"generator": http, "verifier": http}},
        policy={
            "num_generations": 2,
            "per_device_train_batch_size": per_device,
            "max_steps": 2,
            "save_steps": 1,
            "max_completion_length": 8,
            "learning_rate": 5e-2,
            "seed": 1,
            "rubric_max_tokens": 200,
            "rollouts": "trl",
            "keep_resume_checkpoints": keep,
        },
        launch=launch or {},
        policy_eval=None,
    )
    ctx = StepContext(store=str(store_dir), run_id="launch", round_no=1, stage="policy")
    ref = train.train_policy.fn(ctx, cfg, prompts, base, gen, "scripted-verifier").model_dump()
    return ref, {t: s.read_table(t, run_id="launch").to_pylist() for t in TABLES}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_pdsh_launch_hands_deepspeed_a_private_env_file_without_the_store_keys(tmp_path, monkeypatch):
    """accelerate's own multi-machine DeepSpeed path, up to the ``deepspeed`` runner (a stand-in here: no ssh)."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed")
    fake_bin, record = tmp_path / "bin", tmp_path / "record"
    fake_bin.mkdir()
    record.mkdir()
    fake = fake_bin / "deepspeed"
    fake.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$DR_FAKE_DS/argv"\n'
        'stat -c %a "$DS_ENV_FILE" > "$DR_FAKE_DS/mode"\ncp "$DS_ENV_FILE" "$DR_FAKE_DS/env"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(fake_bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    monkeypatch.setenv("DR_FAKE_DS", str(record))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3-secret-stays-home")
    monkeypatch.setenv(KEY_ENV, "sk-travels")
    hosts = tmp_path / "hostfile"
    hosts.write_text("127.0.0.1 slots=1\nlocalhost slots=1\n")
    port = _free_port()
    launch = LaunchSettings(
        num_processes=2,
        num_machines=2,
        config_file="infra/accelerate/zero3-multinode.yaml",
        hostfile=str(hosts),
        main_process_ip="127.0.0.1",
        main_process_port=port,
        timeout_s=300,
    )
    verifier = EngineConfig(kind="openai_http", model="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV)
    repo_env_file = ROOT / ".deepspeed_env"
    existed = repo_env_file.exists()
    out = tmp_path / "out"
    with pytest.raises(multi.LaunchError, match="not a complete model"):  # the stand-in trains nothing
        multi.launch_train(
            "generator",
            "/ckpt/g0",
            [GeneratorRow(0, "q", ("a",), ("b", "c"))],
            GRPOSettings(num_generations=2, per_device_train_batch_size=2),
            out,
            launch,
            verifier=verifier,
        )
    argv = (record / "argv").read_text().splitlines()
    i = argv.index("--hostfile")
    assert argv[i + 1] == str(hosts)
    for flag, value in (
        ("--launcher", "pdsh"),
        ("--num_gpus", "1"),
        ("--master_addr", "127.0.0.1"),
        ("--master_port", str(port)),
    ):
        assert argv[argv.index(flag) + 1] == value, flag
    assert "--no_local_rank" in argv and argv[argv.index("--module") + 1 :][:2] == ["dr_core.train.launch", "generator"]
    env_lines = (record / "env").read_text().splitlines()
    assert f"{KEY_ENV}=sk-travels" in env_lines  # the engines' key reaches every machine
    assert not [line for line in env_lines if line.startswith("AWS_")]  # the store's credentials do not
    assert (record / "mode").read_text().strip() == "600"
    assert not (out / "launch" / "deepspeed_env").exists()  # deleted when the launch ended
    assert repo_env_file.exists() == existed  # nothing appended to ./.deepspeed_env in the repository
