"""Prefect settings for embedded local runs, applied before Prefect is imported.

With no ``PREFECT_API_URL`` a flow runs on Prefect's temporary local server (embedded mode); its database lives
in the dynamicrubric cache. With ``PREFECT_API_URL`` set, the same flows talk to that server instead.
"""

from __future__ import annotations

import os

from dr_core.paths import cache_dir


def configure_prefect() -> None:
    os.environ.setdefault("PREFECT_HOME", str(cache_dir() / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    # The in-process vLLM engine: no engine subprocess, small KV cache, one thread per op on small machines.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # oneDNN keeps a compiled matmul for every token count it has seen (about 0.8 MB each, 1024 by default): a
    # long-running engine's RSS grew ~3 MB per new batch size (issue 41); 64 bounds it at a few tens of MB
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
