"""Typed configuration of the inference engines: one ``EngineConfig`` per role (generator, verifier, policy).

Every field is documented and validated when the config is built, with an error that says how to fix it. Configs
are frozen: a run's config is a value that can be hashed into cache keys.

A YAML or JSON file feeds ``load_engines_config`` (the CLI's ``--config``)::

    generator:
      kind: vllm
      model: /path/to/hf/checkpoint     # or "default" (the prepared SmolLM2-135M-Instruct)
    verifier:
      kind: openai_http
      model: Qwen/Qwen2.5-7B-Instruct   # the served model name
      base_url: http://127.0.0.1:8000/v1

    python -c "from dr_core.config import EngineConfig; print(EngineConfig())"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from dr_core.model import BUNDLED, DEFAULT_ALIAS, is_bundled
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: The model name that means "the default bundled model" (``dr model prepare``): the registry's alias.
DEFAULT_MODEL = DEFAULT_ALIAS

EngineKind = Literal["vllm", "openai_http"]
#: How the verifier turns a check into yes/no (``dr_core.evaluator.verify``): see ``EngineConfig.verdict_mode``.
VerdictMode = Literal["choice", "calibrated", "balanced"]
#: The verifier's prompt (``dr_core.prompts.verifier_messages``): see ``EngineConfig.verifier_prompt``.
VerifierPrompt = Literal["system", "plain"]
ROLES = ("generator", "verifier", "policy")


class ConfigError(ValueError):
    """A config that cannot work, with the fix in the message."""


class EngineConfig(BaseModel):
    """How to run one role's model. Defaults are the CPU settings measured in ENVIRONMENT.md."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EngineKind = Field(
        "vllm",
        description="'vllm': in-process vllm.LLM (CPU or CUDA build). 'openai_http': a remote OpenAI-compatible "
        "server (e.g. `python -m vllm.entrypoints.openai.api_server`), reached at base_url.",
    )
    model: str = Field(
        DEFAULT_MODEL,
        description="For vllm: a bundled model's name (`dr model list`: 'smollm2-135m-instruct' = 'default', "
        "'qwen2.5-coder-0.5b-instruct', ...; prepared on first use) or a local Hugging Face checkpoint directory. "
        "For openai_http: the served model name ('default' asks the server for its only model).",
    )
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="Weights dtype for vllm. float32 on CPU (bf16 is 3-8x slower there)."
    )
    max_model_len: int = Field(4096, ge=256, description="Longest prompt + completion in tokens (vllm).")
    kv_cache_gib: int | None = Field(
        None,
        ge=1,
        description="KV-cache size in GiB (vllm). On CPU it sets VLLM_CPU_KVCACHE_SPACE (None: 2). On CUDA None "
        "lets gpu_memory_utilization size it; a number fixes it (kv_cache_memory_bytes).",
    )
    gpu_memory_utilization: float = Field(
        0.85, gt=0, le=1, description="Fraction of GPU memory vLLM may take (CUDA build only)."
    )
    prefix_caching: bool = Field(
        True, description="Reuse KV cache across requests that share a prefix (what makes verification cheap)."
    )
    enforce_eager: bool = Field(
        True, description="Skip torch.compile/CUDA graphs: start-up 4 s instead of ~140 s on CPU (vllm)."
    )
    max_num_seqs: int | None = Field(None, ge=1, description="Most sequences vLLM runs at once (None: vLLM's).")
    tensor_parallel_size: int = Field(
        1, ge=1, description="vllm (CUDA build): GPUs one model is sharded over (tensor parallelism)."
    )
    data_parallel_size: int = Field(
        1, ge=1, description="vllm (CUDA build): engine replicas that split the requests (data parallelism)."
    )
    base_url: str | None = Field(
        None, description="openai_http only: the server's API root, e.g. http://127.0.0.1:8000/v1."
    )
    api_key: str = Field("EMPTY", description="openai_http only: bearer token (a local vLLM server ignores it).")
    timeout_s: float = Field(600.0, gt=0, description="openai_http only: seconds to wait for one request.")
    concurrency: int = Field(
        16, ge=1, description="openai_http only: requests in flight at once (the server batches them)."
    )
    verdict_mode: VerdictMode = Field(
        "choice",
        description="Verifier role only (other roles ignore it). 'choice': greedy answer constrained to "
        "yes/no (structured choice; only the lowercase words survive the mask). 'calibrated': contextual "
        "calibration (Zhao et al. 2021): the unconstrained first-token log-odds of yes vs no (every case and "
        "spacing of the two words), yes iff above their mean over content-free checks. 'balanced': the same "
        "log-odds, yes iff above their median over the bundled probe (dr_core/data/verifier_probe.jsonl: 24 checks, "
        "half of them true; its labels are not used), so the verifier says yes to half of a balanced set. Both "
        "log-odds modes compute their threshold once per engine (or take verdict_bias) and need an engine that "
        "returns logprobs (both built-in engines do; otherwise they fall back to 'choice'). Which one suits which "
        "model is measured by infra/benchmarks/bench_verdicts.py (README 'Choosing the verdict procedure'). Roles "
        "with equal configs share one engine: set it on every role to keep one model loaded.",
    )
    verdict_bias: float | None = Field(
        None,
        description="Verifier role, verdict_mode 'calibrated' or 'balanced': the yes-vs-no log-odds threshold b "
        "(yes iff log-odds > b). None: estimated by the mode (content-free mean, probe median). A number: a "
        "threshold measured beforehand; it belongs to one model and prompt style.",
    )
    verifier_prompt: VerifierPrompt = Field(
        "system",
        description="Verifier role only: how a check is worded. 'system': the instructions in a system turn, the "
        "prompt, response and criterion in the user turn. 'plain': one user turn, no system turn (instructions, "
        "[User prompt], [Response], [Criterion], then the yes/no question). Chosen per model by measurement "
        "(infra/benchmarks/bench_verdicts.py; README 'Choosing the verdict procedure'); the tiny preset's "
        "verifier uses 'plain'. Both keep the criterion last, so prefix caching serves them alike.",
    )

    @field_validator("model")
    @classmethod
    def _model_nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model is empty: give a checkpoint directory, a served model name, or 'default'")
        return v

    @model_validator(mode="after")
    def _check_kind(self):
        if self.kind == "openai_http":
            if not self.base_url:
                raise ValueError("kind 'openai_http' needs base_url, e.g. http://127.0.0.1:8000/v1")
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError(f"base_url {self.base_url!r} must start with http:// or https://")
        elif self.base_url:
            raise ValueError("base_url is only used with kind 'openai_http'; remove it or set kind: openai_http")
        if self.kind == "vllm" and not is_bundled(self.model):
            path = Path(self.model).expanduser()
            if not (path / "config.json").is_file():
                raise ValueError(
                    f"model {self.model!r} is neither a bundled model ({', '.join(BUNDLED)}; see `dr model list`) "
                    "nor a Hugging Face checkpoint directory (no config.json); give one of those, 'default', or "
                    "use kind: openai_http"
                )
        return self


class EnginesConfig(BaseModel):
    """One engine config per role. A role left out uses the defaults (in-process vLLM, default model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generator: EngineConfig = Field(default_factory=EngineConfig, description="Writes rubrics (DR-Generator).")
    verifier: EngineConfig = Field(default_factory=EngineConfig, description="Frozen yes/no judge (DR-Verifier).")
    policy: EngineConfig = Field(default_factory=EngineConfig, description="Answers prompts (DR-Policy).")


def _explain(exc: ValidationError, source: str) -> ConfigError:
    lines = [f"{source}: invalid engine config"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return ConfigError("\n".join(lines))


def engine_config(**fields) -> EngineConfig:
    """Build an EngineConfig, turning validation errors into a ConfigError that says what to fix."""
    try:
        return EngineConfig(**fields)
    except ValidationError as exc:
        raise _explain(exc, "engine config") from None


def load_engines_config(path: str | Path | None) -> EnginesConfig:
    """Read a YAML/JSON engines file (roles as top-level keys); None gives the defaults."""
    if path is None:
        return EnginesConfig()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys among {', '.join(ROLES)}")
    try:
        return EnginesConfig(**data)
    except ValidationError as exc:
        raise _explain(exc, str(path)) from None
