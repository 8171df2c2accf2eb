"""The scale-out path on CPU: `accelerate launch` with infra/accelerate/zero2.yaml (DeepSpeed ZeRO-2, gloo), two
processes, two GRPO policy steps of a tiny random Llama through ``dr_core.train.launch`` with scripted engines.

The first run compiles DeepSpeed's shared-memory comm op into the project cache (TORCH_EXTENSIONS_DIR), which can
take a few minutes; later runs take about 20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dr_core.train.grpo import is_complete
from dr_core.train.launch import extensions_dir

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_zero2_two_processes_train_whole_groups(tiny_llama_dir, tmp_path):
    pytest.importorskip("deepspeed", reason="deepspeed is not installed")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "\n".join(
            json.dumps({"group_id": i, "prompt_id": f"p{i}", "prompt": q})
            for i, q in enumerate(["Say hi.", "Name a fruit."])
        )
    )
    settings = tmp_path / "settings.json"
    settings.write_text(
        json.dumps(
            dict(
                learning_rate=1e-2,
                num_generations=2,
                per_device_train_batch_size=2,
                max_completion_length=8,
                max_steps=2,
                save_steps=1,
            )
        )
    )
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TORCH_EXTENSIONS_DIR=str(extensions_dir()))
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "infra/accelerate/zero2.yaml",
        "--num_processes",
        "2",
        "tests/support/train_launch_fake.py",
        "policy",
        "--base",
        str(tiny_llama_dir),
        "--rows",
        str(rows),
        "--settings",
        str(settings),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert is_complete(out / "final") and (out / "final" / "tokenizer_config.json").is_file()
    result = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith('{"checkpoint"')][-1])
    assert result["steps"] == 2
    for rank in (0, 1):  # each process scored whole groups of K=2 of its own
        recs = [json.loads(ln) for ln in (out / f"rollouts.rank{rank}.jsonl").read_text().splitlines()]
        assert len(recs) == 4 and [r["rollout"] for r in recs] == [0, 1, 0, 1]
        assert recs[0]["group_id"] == recs[1]["group_id"] and recs[2]["group_id"] == recs[3]["group_id"]
