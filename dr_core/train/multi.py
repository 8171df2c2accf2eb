"""One GRPO update in several processes or on several machines: ``accelerate launch`` of ``dr_core.train.launch``,
driven by ``LaunchSettings`` (``dr_core.train.settings``; ``CoevolveConfig.launch``), so one flow trains in the
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

    .venv/bin/python -m pytest -q tests/test_train_launch.py            # command building, checks, collection
    .venv/bin/python -m pytest -q tests/test_train_launch_accelerate.py # 2 CPU ranks, ZeRO-2, a scripted server
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import yaml

from dr_core import progress
from dr_core.config import EngineConfig, EnginesConfig
from dr_core.paths import REPO_DIR
from dr_core.train.grpo import FINAL_DIR, HISTORY_FILE, RESULT_FILE, OnRollouts, TrainResult, is_complete
from dr_core.train.launch import PROGRESS_ENV, PROGRESS_PREFIX, dump_rows, extensions_dir, rollouts_path
from dr_core.train.settings import HEAD_LAUNCHERS, GRPOSettings, LaunchSettings

#: Lines of the launch's output kept for the error message (all of them go to ``OUT/launch/launch.log``).
TAIL_LINES = 40
#: Seconds between SIGTERM and SIGKILL when a launch is stopped.
STOP_GRACE_S = 30.0


class LaunchError(RuntimeError):
    """A launched update failed (a rank crashed, ran out of memory, a machine was unreachable). Not bad input: the
    task retries it, and the retry resumes from the last checkpoint."""


@dataclass(frozen=True)
class LaunchPlan:
    """What ``check_launch`` resolved: the accelerate config, the hostfile and launcher of a multi-machine run
    (None on one machine), and whether this one command starts every machine."""

    config_file: Path
    distributed_type: str
    hostfile: Path | None
    launcher: str | None
    starts_all_machines: bool


@dataclass(frozen=True)
class LaunchFiles:
    """The update's inputs as the ranks read them."""

    rows: Path
    settings: Path
    engines: Path


# ------------------------------------------------------------------------------------------------ checks


def _resolve(path: str, root: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else root / p


def read_hostfile(path: Path) -> dict[str, int]:
    """A DeepSpeed hostfile: ``hostname slots=N`` per line, ``#`` comments; returns {host: slots}."""
    hosts: dict[str, int] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("slots=") or not parts[1][6:].isdigit():
            raise ValueError(f"{path}:{n}: expected 'hostname slots=N', got {raw.strip()!r}")
        if parts[0] in hosts:
            raise ValueError(f"{path}:{n}: host {parts[0]!r} is listed twice")
        hosts[parts[0]] = int(parts[1][6:])
    return hosts


def check_launch(
    launch: LaunchSettings,
    settings: GRPOSettings,
    role: str,
    engines: Mapping[str, EngineConfig],
    root: Path = REPO_DIR,
) -> LaunchPlan | None:
    """Refuse a launch that cannot work, before anything starts (``ValueError``: bad input, never retried); None
    for an in-process update. ``engines``: the configs the ranks build (role -> config). Checks the GRPO settings
    against the number of processes, the engines' secrets, the accelerate config and, with several machines, the
    launcher and hostfile."""
    if launch.in_process:
        return None
    n, m = launch.num_processes, launch.num_machines
    if settings.rollouts == "vllm":
        raise ValueError(
            f"{role}.rollouts = 'vllm' runs one vLLM engine inside the calling process: it does not "
            f"combine with an accelerate launch (launch.config_file = {launch.config_file!r}); set "
            f"{role}.rollouts: trl, or remove launch.config_file and use one process"
        )
    if n > 1 and settings.per_device_train_batch_size % settings.num_generations:
        raise ValueError(
            f"{role}.per_device_train_batch_size = {settings.per_device_train_batch_size} is not a multiple of "
            f"{role}.num_generations = {settings.num_generations}: with launch.num_processes = {n} TRL splits each "
            "step's batch over the ranks in slices of per_device_train_batch_size, so a group would be split "
            "between two ranks and its set-level reward could not be computed"
        )
    for name, cfg in engines.items():
        if cfg.api_key is not None or cfg.basic_auth is not None:
            raise ValueError(
                f"engine {name}: an inline api_key or basic_auth cannot be handed to the ranks of a launched update "
                "without writing it to disk; put the key in an environment variable and set api_key_env to its name "
                "(the ranks read it from their environment)"
            )
    config_file = _resolve(launch.config_file, root)
    if not config_file.is_file():
        raise ValueError(f"launch.config_file {launch.config_file!r}: no such file (see infra/accelerate/)")
    try:
        acc = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"launch.config_file {config_file}: not valid YAML ({type(exc).__name__})") from None
    if not isinstance(acc, dict):
        raise ValueError(f"launch.config_file {config_file}: expected an accelerate config (a mapping)")
    dist = str(acc.get("distributed_type", "NO"))
    ds = acc.get("deepspeed_config") or {}
    if m == 1:
        return LaunchPlan(config_file, dist, None, None, True)
    if dist != "DEEPSPEED":
        if not launch.main_process_ip:
            raise ValueError(
                f"launch.num_machines = {m} with a {dist} accelerate config ({config_file.name}) needs "
                "launch.main_process_ip: every machine runs its own torchrun that meets the rank-0 one"
            )
        return LaunchPlan(config_file, dist, None, None, False)
    launcher = launch.multinode_launcher or ds.get("deepspeed_multinode_launcher") or "pdsh"
    if launcher not in HEAD_LAUNCHERS | {"standard", "nossh"}:
        raise ValueError(
            f"{config_file}: deepspeed_multinode_launcher {launcher!r} is not one of "
            f"{', '.join(sorted(HEAD_LAUNCHERS | {'standard', 'nossh'}))}"
        )
    if launcher in ("standard", "nossh") and not launch.main_process_ip:
        raise ValueError(f"the {launcher!r} launcher needs launch.main_process_ip: the address of the rank-0 machine")
    hostfile = None
    if launcher in HEAD_LAUNCHERS | {"nossh"}:
        given = launch.hostfile or ds.get("deepspeed_hostfile")
        if not given:
            raise ValueError(
                f"launch.num_machines = {m} with the {launcher!r} launcher needs a DeepSpeed hostfile "
                "(launch.hostfile, or deepspeed_hostfile in the accelerate config): one 'hostname "
                "slots=N' line per machine, see infra/accelerate/hostfile.example"
            )
        hostfile = _resolve(str(given), root)
        if not hostfile.is_file():
            # DeepSpeed itself would only warn and train on this machine alone
            raise ValueError(f"hostfile {str(given)!r}: no such file")
        hosts = read_hostfile(hostfile)
        if len(hosts) != m:
            raise ValueError(f"{hostfile}: {len(hosts)} host(s) listed, launch.num_machines = {m}")
        short = {h: s for h, s in hosts.items() if s < n // m}
        if short:
            raise ValueError(
                f"{hostfile}: {', '.join(short)} list(s) fewer slots than the {n // m} ranks per "
                f"machine (launch.num_processes = {n} over {m} machines)"
            )
    return LaunchPlan(config_file, dist, hostfile, launcher, launcher in HEAD_LAUNCHERS)


# ------------------------------------------------------------------------------------------------ command


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


# ------------------------------------------------------------------------------------------------ running


class ProgressMirror:
    """Turns rank 0's ``DR-PROGRESS {json}`` lines into this process's ``dr_core.progress`` work."""

    def __init__(self):
        self.works: dict[int, progress.Work] = {}

    def __call__(self, line: str) -> bool:
        """Handle one output line; True when it was a progress line (consumed)."""
        if not line.startswith(PROGRESS_PREFIX):
            return False
        try:
            e = json.loads(line[len(PROGRESS_PREFIX) :])
            kind, key = e["event"], int(e["key"])
        except (ValueError, KeyError, TypeError):
            return False  # not ours after all: keep it in the log
        if kind == "start":
            self.works[key] = progress.Work(str(e.get("label", "")), e.get("total"), str(e.get("unit", "items")))
        elif kind == "advance" and key in self.works:
            self.works[key].advance(int(e.get("n", 1)))
        elif kind == "stop" and key in self.works:
            self.works.pop(key).close()
        return True

    def close(self) -> None:
        while self.works:
            self.works.popitem()[1].close()


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the launch's process group (accelerate, torchrun or DeepSpeed's runner, and the ranks; DeepSpeed's
    runner stops its remote ranks on SIGTERM) unless it has exited, then SIGKILL what is left of the group after
    ``grace_s``. The group is the one ``run_launch`` started (``start_new_session``): nothing else is touched."""

    def signal_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone

    if proc.poll() is None:
        signal_group(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    signal_group(signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_launch(
    cmd: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path,
    timeout_s: float,
    log_path: str | Path,
    on_line: Callable[[str], bool] | None = None,
    what: str = "the launch",
    grace_s: float = STOP_GRACE_S,
) -> float:
    """Run ``cmd`` in its own process group, stdout and stderr into ``log_path``; ``on_line`` sees every line first
    and returns True for one it consumed (progress); the others' last ``TAIL_LINES`` go into the error. Returns
    the seconds it took. Raises ``LaunchError`` on a non-zero exit and ``TimeoutError`` past ``timeout_s`` (its
    processes are stopped first)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    start = time.monotonic()
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    echo = progress.verbose()
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            list(cmd),
            cwd=str(cwd),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )

        def pump() -> None:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip("\n")
                if on_line is not None and on_line(line):
                    continue
                tail.append(line)
                if echo:
                    print(line, file=sys.stderr, flush=True)

        reader = threading.Thread(target=pump, name="launch-output", daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc, grace_s)
            reader.join(timeout=10)
            raise TimeoutError(
                f"{what} ran past launch.timeout_s = {timeout_s:g} s and was stopped; its last "
                f"lines (all of them: {log_path}):\n" + "\n".join(tail)
            ) from None
        except BaseException:  # interrupted or cancelled: the ranks must not outlive the step
            _stop(proc, grace_s)
            raise
        reader.join(timeout=30)  # a rank that still holds the pipe open must not hang the step
        if rc != 0:
            _stop(proc, 0.0)  # what the launcher left of its group
    seconds = time.monotonic() - start
    if rc != 0:
        raise LaunchError(
            f"{what} failed (exit {rc}) after {seconds:.0f} s; its last lines (all of them: "
            f"{log_path}):\n" + "\n".join(tail)
        )
    return seconds


# ------------------------------------------------------------------------------------------------ results


def _history_path(out: Path, rank: int) -> Path:
    # the naming of dr_core.train.grpo._history_path, for a given rank
    return out / (HISTORY_FILE if rank == 0 else f"history.rank{rank}.jsonl")


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
        hist = _history_path(out, rank)
        history.extend({**e, "rank": rank} for e in (_jsonl(hist) if hist.is_file() else []))
    keyed.sort(key=lambda kr: kr[0])
    history.sort(key=lambda e: (e["step"], e["rank"]))  # stable: a rank's calls within a step stay in order
    result.history = history
    if history:
        result.reward_first = _step_mean(history, history[0]["step"])
        result.reward_last = _step_mean(history, history[-1]["step"])
    return result, [rec for _key, rec in keyed]


# ------------------------------------------------------------------------------------------------ the update


def _env_file(path: Path) -> Path:
    """An empty file only this user can read, for the environment accelerate writes for DeepSpeed's launcher."""
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
    return path


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
        folder = out / "launch"
        files = write_inputs(folder, role, rows, settings, engines)
        cmd = accelerate_command(launch, plan, role, base, files, out, python)
        keep = {c.api_key_env for c in engines.values() if c.api_key_env}
        env = launch_env(launch, os.environ, keep, python, root, str(extensions_dir()))
        env_file = None
        if launch.num_machines > 1 and plan.distributed_type == "DEEPSPEED" and plan.launcher != "standard":
            env_file = env["DS_ENV_FILE"] = str(_env_file(folder / "deepspeed_env"))
        if not plan.starts_all_machines:
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
    result, records = collect(out, launch.num_processes)
    if on_rollouts is not None:
        on_rollouts(records)
    return result
