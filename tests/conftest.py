"""Shared test set-up. Fixtures for the real S3 server and the real model live in their own modules."""

import os

# 2-core machines: one thread per heavy op keeps a loaded machine from thrashing (ENVIRONMENT.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_model", "tests.fixtures_prefect", "tests.fixtures_grpo"]
