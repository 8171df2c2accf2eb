"""The command of a launched GRPO update (``dr_core.train.multi``): the input files the ranks read
(``write_inputs``: the rows as JSON lines, ``GRPOSettings`` and the engines config as JSON), the ``accelerate
launch`` command line of ``dr_core.train.launch`` (``accelerate_command``; ``worker_command`` for the machines that
one command does not start), and the launcher's environment (``launch_env``).

The engines file holds no secret: it is written with ``model_dump(mode="json")``, which masks any, and
``check_launch`` (``dr_core.train.plan``) has refused inline ones. The environment withholds the variables matching
``launch.withhold_env`` except those an engine's ``api_key_env`` names (see "Secrets" in ``dr_core.train.multi``).

    .venv/bin/python -m pytest -q tests/unit/test_train_launch.py   # the command, among the launcher's other logic
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from dr_core.config import EngineConfig, EnginesConfig
from dr_core.config.training import GRPOSettings, LaunchSettings
from dr_core.paths import REPO_DIR
from dr_core.train.launch import PROGRESS_ENV, dump_rows
from dr_core.train.plan import LaunchPlan


@dataclass(frozen=True)
class LaunchFiles:
    """The update's inputs as the ranks read them."""

    rows: Path
    settings: Path
    engines: Path


def write_inputs(
    folder: str | Path, role: str, rows, settings: GRPOSettings, engines: Mapping[str, EngineConfig]
) -> LaunchFiles:
    """The rows (``launch.load_rows``' JSON lines), settings and engines config (JSON) the ranks read."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = LaunchFiles(folder / f"{role}-rows.jsonl", folder / "settings.json", folder / "engines.json")
    dump_rows(rows, files.rows)
    files.settings.write_text(settings.model_dump_json(), encoding="utf-8")
    # mode="json" masks secrets; check_launch has refused inline ones, so the ranks lose nothing
    files.engines.write_text(json.dumps(EnginesConfig(**dict(engines)).model_dump(mode="json")), encoding="utf-8")
    return files


def accelerate_command(
    launch: LaunchSettings,
    plan: LaunchPlan,
    role: str,
    base: str | Path,
    files: LaunchFiles,
    out: str | Path,
    python: str = sys.executable,
) -> list[str]:
    """The ``accelerate launch`` command line of one launched update (run from the repository root)."""
    cmd = [
        python,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(plan.config_file),
        "--num_processes",
        str(launch.num_processes),
        "--num_machines",
        str(launch.num_machines),
    ]
    if launch.num_machines > 1:
        cmd += ["--machine_rank", str(launch.machine_rank)]
    if launch.main_process_ip:
        cmd += ["--main_process_ip", launch.main_process_ip]
    if launch.main_process_port is not None:
        cmd += ["--main_process_port", str(launch.main_process_port)]
    if plan.launcher is not None:
        cmd += ["--deepspeed_multinode_launcher", plan.launcher]
    if plan.hostfile is not None:
        cmd += ["--deepspeed_hostfile", str(plan.hostfile)]
    cmd += [
        "-m",
        "dr_core.train.launch",
        role,
        "--base",
        str(base),
        "--rows",
        str(files.rows),
        "--settings",
        str(files.settings),
        "--engines",
        str(files.engines),
        "--out",
        str(out),
    ]
    return cmd


def worker_command(cmd: Sequence[str], machine_rank: int) -> list[str]:
    """``cmd`` as machine ``machine_rank`` runs it (the 'standard' and 'nossh' launchers, non-DeepSpeed configs)."""
    out = list(cmd)
    i = out.index("--machine_rank")
    out[i + 1] = str(machine_rank)
    return out


def launch_env(
    launch: LaunchSettings,
    base: Mapping[str, str],
    keep: set[str] | frozenset[str] = frozenset(),
    python: str = sys.executable,
    root: Path = REPO_DIR,
    torch_extensions: str | None = None,
) -> dict[str, str]:
    """The environment of the launcher: ``base`` without the variables ``launch.withhold_env`` matches (``keep``:
    names passed anyway, the engines' api_key_env), plus ``launch.env``, the repository on PYTHONPATH, this
    Python's bin directory on PATH (first, unless PATH has it: accelerate runs the ``deepspeed`` script by name),
    the compiled-ops cache and the progress-lines switch."""
    env = {
        k: v
        for k, v in base.items()
        if k in keep or not any(fnmatch.fnmatchcase(k, pattern) for pattern in launch.withhold_env)
    }
    env.update(dict(launch.env))
    env["PYTHONPATH"] = os.pathsep.join([str(root), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    if str(Path(python).parent) not in path:
        env["PATH"] = os.pathsep.join([str(Path(python).parent), *path])
    if torch_extensions is not None:
        env.setdefault("TORCH_EXTENSIONS_DIR", torch_extensions)
    env[PROGRESS_ENV] = "1"
    return env
