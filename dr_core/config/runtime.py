"""Prefect settings for embedded local runs, applied before Prefect is imported.

With no ``PREFECT_API_URL`` a flow runs on Prefect's temporary local server (embedded mode); its database lives
in the dynamicrubric cache. With ``PREFECT_API_URL`` set, the same flows talk to that server instead.
"""

from __future__ import annotations

import os

from dr_core.paths import cache_dir

#: oneDNN keeps a compiled matmul per batch token count (1024 by default): on the 0.5B verifier each new prompt length
#: added about 3.1 MiB of RSS, never given back (issue 41); with 64 the growth stopped after about 40 lengths (+35 MiB)
ONEDNN_CACHE = "64"


def configure_prefect() -> None:
    os.environ.setdefault("PREFECT_HOME", str(cache_dir() / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    # The in-process vLLM engine: no engine subprocess, small KV cache, one thread per op on small machines.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE)  # bounded memory (ONEDNN_CACHE)
