"""One GRPO update in several processes or on several machines: ``accelerate launch`` of ``dr_core.train.launch``,
driven by ``LaunchSettings`` (``dr_core.config.training``; ``CoevolveConfig.launch``), so one flow trains in the
calling process on a laptop, on N GPUs of one machine, and on M machines.

The three shapes (``launch:`` in the co-evolution config):

- ``{}`` (the default): no launch at all. ``tasks/train.py`` calls ``dr_core.train.grpo`` in its own process with
  the engines of its pool; nothing here runs.
- ``{num_processes: 8, config_file: infra/accelerate/zero3.yaml}``: one machine, 8 ranks (DeepSpeed ZeRO-3).
- ``{num_processes: 16, num_machines: 2, config_file: infra/accelerate/zero3-multinode.yaml, hostfile: ...,
  main_process_ip: ...}``: DeepSpeed's pdsh launcher starts the ranks of both machines from this one command.

``launch_train`` is the launched twin of ``grpo.train_generator`` / ``grpo.train_policy``: same inputs (engine
*configs* instead of engines: every rank builds its own), same ``TrainResult``, same ``on_rollouts`` records. It
writes the update's inputs into ``OUT/launch/`` (rows as JSON lines, ``GRPOSettings`` and the engines config as
JSON), runs

    python -m accelerate.commands.launch --config_file CFG --num_processes N --num_machines M [...] \\
        -m dr_core.train.launch ROLE --base DIR --rows ... --settings ... --engines ... --out OUT

from the repository root with a wall-clock limit, mirrors rank 0's progress lines into ``dr_core.progress`` (the
CLI's bar), keeps the whole output in ``OUT/launch/launch.log`` and its last lines for the error, and then reads
``OUT/final/result.json`` and every rank's ``OUT/rollouts.rank<R>.jsonl`` back. Records are handed on ordered by
(GRPO step, rank), each rank's in its own order, so the rollout tables numbered from them do not depend on which
rank finished first. The result's ``history`` holds every rank's reward calls (each entry with its ``rank``), so the
counts the task sums cover the whole batch; ``reward_first`` / ``reward_last`` are the mean over the ranks of the
first / last step. A finished ``OUT`` (complete model, every rank's records) is read back without launching again.

The pieces: ``dr_core.train.plan`` checks a launch before anything starts (``check_launch``, ``LaunchPlan``),
``dr_core.train.command`` writes the input files and builds the command line and its environment, and
``dr_core.train.runner`` runs it (``run_launch``, ``ProgressMirror``, ``LaunchError``); this module reads the result
back (``collect``) and puts them together (``launch_train``). Their public names are importable from here too.

Secrets. The ranks need the engines' credentials, and a file for them would put keys on disk (on several machines,
a shared disk). So an engine with an inline ``api_key`` or ``basic_auth`` is refused for a launched update: name an
environment variable with ``api_key_env`` instead. The engines file then holds no secret (it is written with
``model_dump(mode="json")``, which masks any anyway), and the ranks read the key from their environment. On one
machine the environment is inherited in memory. With several machines and a DeepSpeed launcher other than
'standard', accelerate 1.15 appends its whole environment to DeepSpeed's env file (``DS_ENV_FILE``, by default
``./.deepspeed_env`` in the repository, never removed), and DeepSpeed exports every line of it on every machine.
So the launch points ``DS_ENV_FILE`` at ``OUT/launch/deepspeed_env``, created 0600 and deleted when the launch
ends, and every launch withholds the variables matching ``launch.withhold_env`` (by default the store's ``AWS_*``
and the hub's token, which training never needs) except those an engine's ``api_key_env`` names.

    .venv/bin/python -m pytest -q tests/unit/test_train_launch.py            # command building, checks, collection
    .venv/bin/python -m pytest -q tests/unit/test_train_launch_accelerate.py # 2 CPU ranks, ZeRO-2, a scripted server
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from dr_core.config import EngineConfig
from dr_core.config.training import GRPOSettings, LaunchSettings
from dr_core.paths import REPO_DIR
from dr_core.train.command import LaunchFiles, accelerate_command, launch_env, worker_command, write_inputs
from dr_core.train.launch import extensions_dir, rollouts_path
from dr_core.train.plan import LaunchPlan, check_launch, read_hostfile
from dr_core.train.publish import FINAL_DIR, RESULT_FILE, TrainResult, is_complete
from dr_core.train.resume import history_path
from dr_core.train.rows import OnRollouts
from dr_core.train.runner import STOP_GRACE_S, TAIL_LINES, LaunchError, ProgressMirror, run_launch

__all__ = [
    "STOP_GRACE_S",
    "TAIL_LINES",
    "LaunchError",
    "LaunchFiles",
    "LaunchPlan",
    "ProgressMirror",
    "accelerate_command",
    "check_launch",
    "collect",
    "finished",
    "launch_env",
    "launch_train",
    "read_hostfile",
    "run_launch",
    "worker_command",
    "write_inputs",
]


# ------------------------------------------------------------------------------------------------ results


def _jsonl(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise LaunchError(f"{path}:{n}: not a JSON record ({exc.msg})") from None
    return out


def finished(out: str | Path, num_processes: int) -> bool:
    """True when ``out`` holds a complete model and the rollout records of every rank."""
    out = Path(out)
    return is_complete(out / FINAL_DIR) and all(rollouts_path(out, r).is_file() for r in range(num_processes))


def _step_mean(history: list[dict], step: int) -> float | None:
    vals = [e["reward_mean"] for e in history if e["step"] == step and e.get("reward_mean") is not None]
    return sum(vals) / len(vals) if vals else None


def collect(out: str | Path, num_processes: int) -> tuple[TrainResult, list[dict]]:
    """The result of a finished launched update and the rollout records of all its ranks, ordered by (step, rank)
    (each rank's records in their own order). The result's history is every rank's, each entry with its
    ``rank``; ``reward_first`` / ``reward_last``: the mean over the ranks of the first and last step."""
    out = Path(out)
    final = out / FINAL_DIR
    if not is_complete(final):
        raise LaunchError(f"{final} is not a complete model after the launch (see {out / 'launch' / 'launch.log'})")
    result = TrainResult(**json.loads((final / RESULT_FILE).read_text(encoding="utf-8")))
    keyed, history = [], []
    for rank in range(num_processes):
        path = rollouts_path(out, rank)
        if not path.is_file():
            raise LaunchError(
                f"{path} is missing: rank {rank} handed over no rollout records (with several "
                "machines the cache directory, $DR_CACHE_DIR, must be one filesystem they share at "
                "the same path)"
            )
        keyed.extend(((rec["step"], rank, i), rec) for i, rec in enumerate(_jsonl(path)))
        hist = history_path(out, rank)
        history.extend({**e, "rank": rank} for e in (_jsonl(hist) if hist.is_file() else []))
    keyed.sort(key=lambda kr: kr[0])
    history.sort(key=lambda e: (e["step"], e["rank"]))  # stable: a rank's calls within a step stay in order
    result.history = history
    if history:
        result.reward_first = _step_mean(history, history[0]["step"])
        result.reward_last = _step_mean(history, history[-1]["step"])
    return result, [rec for _key, rec in keyed]


# ------------------------------------------------------------------------------------------------ the update


def launch_train(
    role: str,
    base: str | Path,
    rows,
    settings: GRPOSettings,
    out_dir: str | Path,
    launch: LaunchSettings,
    *,
    verifier: EngineConfig,
    generator: EngineConfig | None = None,
    on_rollouts: OnRollouts | None = None,
    python: str = sys.executable,
    root: Path = REPO_DIR,
) -> TrainResult:
    """One update (``role`` 'generator' or 'policy') by ``accelerate launch`` as ``launch`` says; the launched twin
    of ``grpo.train_generator`` / ``grpo.train_policy`` (see the module docstring). ``verifier`` / ``generator``:
    the configs every rank builds its reward engines from (the policy update needs both). Hands ``on_rollouts``
    every record of the run once, and returns rank 0's result with every rank's history."""
    if role == "policy" and generator is None:
        raise ValueError("the policy update needs a generator engine config (G(t))")
    engines = {"verifier": verifier, **({"generator": generator} if role == "policy" else {})}
    plan = check_launch(launch, settings, role, engines, root)
    if plan is None:
        raise ValueError("launch runs in-process (no launch.config_file): call dr_core.train.grpo directly")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not finished(out, launch.num_processes):
        _launch(role, base, rows, settings, out, launch, plan, engines, python, root)
    result, records = collect(out, launch.num_processes)
    if on_rollouts is not None:
        on_rollouts(records)
    return result


def _launch(
    role: str,
    base: str | Path,
    rows,
    settings: GRPOSettings,
    out: Path,
    launch: LaunchSettings,
    plan: LaunchPlan,
    engines: dict[str, EngineConfig],
    python: str,
    root: Path,
) -> None:
    """Write the inputs to ``out/launch/`` and run the accelerate command there, rank 0's progress mirrored here;
    DeepSpeed's env file (where accelerate writes one) is private to this user and deleted when the launch ends."""
    folder = out / "launch"
    files = write_inputs(folder, role, rows, settings, engines)
    cmd = accelerate_command(launch, plan, role, base, files, out, python)
    keep = {c.api_key_env for c in engines.values() if c.api_key_env}
    env = launch_env(launch, os.environ, keep, python, root, str(extensions_dir()))
    env_file = None
    if launch.num_machines > 1 and plan.distributed_type == "DEEPSPEED" and plan.launcher != "standard":
        env_file = env["DS_ENV_FILE"] = str(_env_file(folder / "deepspeed_env"))
    if not plan.starts_all_machines:
        _tell_the_other_machines(role, launch, cmd)
    mirror = ProgressMirror()
    try:
        run_launch(
            cmd,
            env,
            root,
            launch.timeout_s,
            folder / "launch.log",
            mirror,
            what=f"accelerate launch of the {role} update ({launch.num_processes} processes, "
            f"{launch.num_machines} machine(s))",
        )
    finally:
        mirror.close()
        if env_file is not None:
            Path(env_file).unlink(missing_ok=True)


def _env_file(path: Path) -> Path:
    """An empty file only this user can read, for the environment accelerate writes for DeepSpeed's launcher."""
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
    return path


def _tell_the_other_machines(role: str, launch: LaunchSettings, cmd: list[str]) -> None:
    """Print the command every other machine must run (this one starts machine ``launch.machine_rank`` only)."""
    others = "\n".join(
        f"  machine {r}: {shlex.join(worker_command(cmd, r))}"
        for r in range(launch.num_machines)
        if r != launch.machine_rank
    )
    print(
        f"[{role} update] this step starts machine {launch.machine_rank} only; start the others from the "
        f"repository root with the same environment:\n{others}",
        file=sys.stderr,
        flush=True,
    )
