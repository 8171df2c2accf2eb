"""The checks of a launched GRPO update (``dr_core.train.multi``), before anything starts: ``check_launch`` refuses a
launch that cannot work (``ValueError``: bad input, never retried) and resolves its ``LaunchPlan``.

It checks the GRPO settings against the number of processes (in-process vLLM rollouts do not combine with a launch;
with several ranks each must get whole groups), the engines' secrets (no inline ``api_key`` or ``basic_auth``: see
"Secrets" in ``dr_core.train.multi``), the accelerate config and, with several machines, the launcher (DeepSpeed's
pdsh-like head launchers start every machine from this one command; 'standard' and 'nossh', and non-DeepSpeed
configs, need the command run on every machine) and the DeepSpeed hostfile (one ``hostname slots=N`` line per
machine, enough slots for the ranks of each).

    .venv/bin/python -m pytest -q tests/unit/test_train_launch.py   # the checks, among the launcher's other logic
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

from dr_core.config import EngineConfig
from dr_core.config.training import HEAD_LAUNCHERS, GRPOSettings, LaunchSettings
from dr_core.paths import REPO_DIR


@dataclass(frozen=True)
class LaunchPlan:
    """What ``check_launch`` resolved: the accelerate config, the hostfile and launcher of a multi-machine run
    (None on one machine), and whether this one command starts every machine."""

    config_file: Path
    distributed_type: str
    hostfile: Path | None
    launcher: str | None
    starts_all_machines: bool


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
    _check_settings(launch, settings, role)
    _check_secrets(engines)
    config_file, acc = _accelerate_config(launch, root)
    dist = str(acc.get("distributed_type", "NO"))
    ds = acc.get("deepspeed_config") or {}
    if launch.num_machines == 1:
        return LaunchPlan(config_file, dist, None, None, True)
    return _multinode_plan(launch, config_file, dist, ds, root)


def _check_settings(launch: LaunchSettings, settings: GRPOSettings, role: str) -> None:
    """The GRPO settings against the launch: no in-process vLLM rollouts; with several ranks, whole groups each."""
    n = launch.num_processes
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


def _check_secrets(engines: Mapping[str, EngineConfig]) -> None:
    """No engine with an inline secret: the ranks could only get it from a file."""
    for name, cfg in engines.items():
        if cfg.api_key is not None or cfg.basic_auth is not None:
            raise ValueError(
                f"engine {name}: an inline api_key or basic_auth cannot be handed to the ranks of a launched update "
                "without writing it to disk; put the key in an environment variable and set api_key_env to its name "
                "(the ranks read it from their environment)"
            )


def _accelerate_config(launch: LaunchSettings, root: Path) -> tuple[Path, dict]:
    """The accelerate config file (resolved against ``root``) and its contents."""
    config_file = _resolve(launch.config_file, root)
    if not config_file.is_file():
        raise ValueError(f"launch.config_file {launch.config_file!r}: no such file (see infra/accelerate/)")
    try:
        acc = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"launch.config_file {config_file}: not valid YAML ({type(exc).__name__})") from None
    if not isinstance(acc, dict):
        raise ValueError(f"launch.config_file {config_file}: expected an accelerate config (a mapping)")
    return config_file, acc


def _multinode_plan(launch: LaunchSettings, config_file: Path, dist: str, ds: dict, root: Path) -> LaunchPlan:
    """The plan of a launch over several machines: its launcher and, where the launcher needs one, the hostfile."""
    m = launch.num_machines
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
        hostfile = _check_hostfile(launch, launcher, ds, root)
    return LaunchPlan(config_file, dist, hostfile, launcher, launcher in HEAD_LAUNCHERS)


def _check_hostfile(launch: LaunchSettings, launcher: str, ds: dict, root: Path) -> Path:
    """The DeepSpeed hostfile (``launch.hostfile`` or the accelerate config's), listing every machine with room for
    its ranks."""
    n, m = launch.num_processes, launch.num_machines
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
    return hostfile
