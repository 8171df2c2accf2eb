"""Typed configuration of the inference engines: one ``EngineConfig`` per role (generator, verifier, policy).

Every field is documented and validated when the config is built, with an error that says how to fix it. Configs
are frozen: a run's config is a value that can be hashed into cache keys.

A YAML or JSON file feeds ``load_engines_config`` (the CLI's ``--engines``)::

    generator:
      kind: vllm
      model: /path/to/hf/checkpoint     # or "default" (the prepared SmolLM2-135M-Instruct)
    verifier:
      kind: openai_http
      model: Qwen/Qwen2.5-7B-Instruct   # the served model name
      base_url: http://127.0.0.1:8000/v1
      api_key_env: VERIFIER_API_KEY     # or api_key: ...; or http://user:password@host/v1 (basic auth)
    policy:
      kind: openai_http
      model: default                    # every endpoint must serve the same one model
      base_url: [http://10.0.0.5:8000/v1, http://10.0.0.6:8000/v1]   # replicas: balanced, failed over

Secrets (``api_key``, ``basic_auth``) are ``pydantic.SecretStr``: the real value stays in the config object (which
the CLI, the flows and the tasks pass in-process) and is read only by the HTTP engine (``get_secret_value``). A repr,
``model_dump_json()`` and ``model_dump(mode="json")`` (what Prefect stores as flow parameters, what the ``runs``
table records, what cache keys hash) show ``**********``; cache keys leave them out (``AUTH_FIELDS``), so rotating a
key keeps the cache. A config read back from such JSON carries the mask, not the key: the engine then refuses to
start (ConfigError) instead of sending it; ``api_key_env`` (a variable read when the engine starts) survives the
round trip. ``user:password@`` in a base_url is moved into ``basic_auth`` when the config is built; every URL in a
message goes through ``redact_url``.

    python -c "from dr_core.config import EngineConfig; print(EngineConfig())"
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from dr_core.constants import ENGINE_ROLES
from dr_core.errors import DRError
from dr_core.model import BUNDLED, DEFAULT_ALIAS, is_bundled

#: The model name that means "the default bundled model" (``dr model prepare``): the registry's alias.
DEFAULT_MODEL = DEFAULT_ALIAS

EngineKind = Literal["vllm", "openai_http"]
#: How the verifier turns a check into yes/no (``dr_core.evaluator.verify.verify``): see ``EngineConfig.verdict_mode``.
VerdictMode = Literal["choice", "calibrated", "balanced"]
#: The verifier's prompt (``dr_core.rubric.prompts.verifier_messages``): see ``EngineConfig.verifier_prompt``.
VerifierPrompt = Literal["system", "plain"]


class ConfigError(DRError, ValueError):
    """A config that cannot work, with the fix in the message."""


#: What a secret becomes in a repr and in JSON (pydantic's SecretStr mask). A config read back from JSON holds this.
REDACTED = "**********"
#: EngineConfig fields that hold secrets: masked in reprs and JSON.
SECRET_FIELDS = frozenset({"api_key", "basic_auth"})
#: EngineConfig fields that say how to authenticate, not what a model answers: left out of cache keys
#: (tasks/options.py), so a new or rotated key keeps the cache.
AUTH_FIELDS = SECRET_FIELDS | {"api_key_env"}
#: api_key values that mean "no key" (the OpenAI client's placeholder for a server without auth).
_NO_KEY = ("", "EMPTY")


def redact_url(url: str | None) -> str | None:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for reprs, messages, logs, model ids)."""
    if not url or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def split_url_credentials(url: str) -> tuple[str, str | None]:
    """(url without ``user:password@``, ``"user:password"`` as written in the URL, or None when it has none)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=host)), userinfo


def is_redacted(secret: SecretStr | None) -> bool:
    """True for a secret that was read back from JSON: the mask, not a key."""
    return secret is not None and secret.get_secret_value() == REDACTED


class EngineConfig(BaseModel):
    """How to run one role's model. Defaults are the CPU settings measured in ENVIRONMENT.md."""

    # hide_input_in_errors: a validation error must not echo the input (it may hold api_key or a URL's password)
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

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
        "auto",
        description="Weights and KV-cache dtype (vllm). 'auto' is resolved when the config is built "
        "(dr_core/config/numerics.py): bfloat16 on a CUDA machine or a CPU with bf16 instructions (avx512_bf16, "
        "amx_bf16; "
        "measured 1.8x faster than float32 there, with half the weights' memory), float32 on any other CPU (where "
        "bf16 is emulated and was measured 3-8x slower). The resolved dtype is part of the engine's identity and of "
        "every cache key over its output. openai_http ignores it (the server chooses) and keeps 'auto'.",
    )
    max_model_len: int = Field(4096, ge=256, description="Longest prompt + completion in tokens (vllm).")
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        description="KV-cache size in GiB, fractions allowed (vllm; kv_cache_memory_bytes). On CPU None means 2. "
        "On CUDA None lets gpu_memory_utilization size it; a number fixes it.",
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
    block_size: int | None = Field(
        None,
        ge=16,
        multiple_of=16,
        description="KV-cache block size in tokens (vllm). Prefix-cache hits are whole blocks, so every verdict "
        "recomputes the part of its shared prefix past the last full block (half a block on average). None: 32 "
        "on the CPU build (the smallest its attention kernel takes; vLLM's CPU default is 128), vLLM's default "
        "elsewhere. On CPU give a multiple of 32. Measured by infra/benchmarks/bench_verify.py.",
    )
    max_num_seqs: int | None = Field(None, ge=1, description="Most sequences vLLM runs at once (None: vLLM's).")
    tensor_parallel_size: int = Field(
        1, ge=1, description="vllm (CUDA build): GPUs one model is sharded over (tensor parallelism)."
    )
    data_parallel_size: int = Field(
        1, ge=1, description="vllm (CUDA build): engine replicas that split the requests (data parallelism)."
    )
    base_url: str | tuple[str, ...] | None = Field(
        None,
        description="openai_http only: the server's API root, e.g. http://127.0.0.1:8000/v1, or a list of them: "
        "replicas serving the same model, between which requests are balanced by least outstanding requests, an "
        "unreachable one being marked down and its requests moved to the others (dr_core/engines/openai_http/). "
        "A list of one is that one string; a URL listed twice is refused. Credentials written into a URL "
        "(http://user:password@host/v1) are moved into basic_auth when the config is built, so the URLs that are "
        "kept, shown and recorded have none; in a list every URL must carry the same ones, or none. Read it "
        "through base_urls (always a tuple).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="openai_http only: bearer token (Authorization: Bearer ...). A secret: masked in reprs and JSON "
        "('**********'), left out of cache keys. None (or 'EMPTY'): no key (sends 'Bearer EMPTY', which a local "
        "vLLM server without --api-key ignores). A config read back from JSON has the mask, not the key: prefer "
        "api_key_env for runs that are resumed from a record.",
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="openai_http only: name of an environment variable holding the bearer token, read when the "
        "engine starts (the config records only the name). Give api_key or api_key_env, not both.",
    )
    basic_auth: SecretStr | None = Field(
        None,
        repr=False,
        description="openai_http only: 'user:password' (percent-encoded as in a URL) sent as HTTP basic auth; set "
        "from a base_url of the form http://user:password@host/v1. A secret, like api_key; not with api_key.",
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        description="openai_http only: read timeout, seconds: the longest wait for the server's reply data within "
        "one attempt (it bounds each wait for bytes, not a whole reply). A cut-off attempt is retried (attempts).",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="openai_http only: seconds to wait for a connection within one attempt."
    )
    attempts: int = Field(
        3,
        ge=1,
        description="openai_http only: tries per request (1: no retry). A transport error (refused, reset, a "
        "connect or read timeout) or HTTP 429/5xx is retried after retry_backoff_s * 2**k seconds (1 s, then 2 s "
        "by default); other HTTP errors and malformed replies fail at once. Worst case per request: attempts x "
        "(connect_timeout_s + timeout_s) + the backoffs.",
    )
    retry_backoff_s: float = Field(
        1.0, ge=0, description="openai_http only: first pause between attempts, seconds; doubled after each retry."
    )
    concurrency: int = Field(
        16,
        ge=1,
        description="openai_http only: requests in flight at once per endpoint (the server batches them); with a "
        "base_url list, up to concurrency x endpoints in all.",
    )
    endpoint_cooldown_s: float = Field(
        30.0,
        gt=0,
        description="openai_http with a base_url list: seconds an endpoint marked down (connection refused or "
        "reset) is left alone before one request probes it again, so a restarted replica comes back.",
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
        "model is measured by infra/benchmarks/bench_verdicts.py (docs/how-to/evaluate-the-evaluator.md). Roles "
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
        "(infra/benchmarks/bench_verdicts.py; docs/how-to/evaluate-the-evaluator.md); the tiny preset's "
        "verifier uses 'plain'. Both keep the criterion last, so prefix caching serves them alike.",
    )

    @model_validator(mode="before")
    @classmethod
    def _url_credentials(cls, data):
        """Move ``user:password@`` out of base_url into basic_auth (so no URL the config shows carries them); a
        list of one URL becomes that URL, and the URLs of a list must carry the same credentials or none."""
        if not isinstance(data, dict):
            return data
        urls = data.get("base_url")
        if isinstance(urls, (list, tuple)) and all(isinstance(u, str) for u in urls):
            if not urls:
                raise ValueError("base_url is an empty list: give one URL or a list of them")
            if len(urls) == 1:
                urls = urls[0]
            else:
                split = [split_url_credentials(u) for u in urls]
                userinfos = {info for _, info in split}
                if len(userinfos) > 1:  # name the URLs by position: never echo a credential
                    with_creds = [f"base_url[{i}]" for i, (_, info) in enumerate(split) if info is not None]
                    what = (
                        "different user:password@ in the URLs"
                        if None not in userinfos
                        else f"user:password@ in {', '.join(with_creds)} but not in the other URLs"
                    )
                    raise ValueError(
                        f"base_url: {what}: one engine sends one set of credentials; write the same "
                        "user:password@ in every URL, or none and give basic_auth once"
                    )
                (userinfo,) = userinfos
                data = {**data, "base_url": tuple(url for url, _ in split)}
                if userinfo is not None:
                    if data.get("basic_auth") is not None:
                        raise ValueError("credentials given twice: in base_url (user:password@) and in basic_auth")
                    data["basic_auth"] = userinfo
                return data
        if isinstance(urls, str):
            url, userinfo = split_url_credentials(urls)
            data = {**data, "base_url": url}
            if userinfo is not None:
                if data.get("basic_auth") is not None:
                    raise ValueError("credentials given twice: in base_url (user:password@) and in basic_auth")
                data["basic_auth"] = userinfo
        return data

    @model_validator(mode="before")
    @classmethod
    def _resolve_dtype(cls, data):
        """``dtype: auto`` of an in-process engine becomes this machine's dtype
        (``dr_core.config.numerics.auto_dtype``)."""
        if isinstance(data, dict) and data.get("dtype", "auto") == "auto" and data.get("kind", "vllm") == "vllm":
            from dr_core.config.numerics import auto_dtype

            data = {**data, "dtype": auto_dtype()}
        return data

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The endpoints, in the order given: ``()`` without a base_url, one for a single URL."""
        if self.base_url is None:
            return ()
        return (self.base_url,) if isinstance(self.base_url, str) else tuple(self.base_url)

    @field_validator("api_key")
    @classmethod
    def _no_key(cls, v: SecretStr | None) -> SecretStr | None:
        return None if v is not None and v.get_secret_value().strip() in _NO_KEY else v

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
            seen: set[str] = set()
            for url in self.base_urls:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(f"base_url {redact_url(url)!r} must start with http:// or https://")
                if url.rstrip("/") in seen:
                    raise ValueError(f"base_url lists {redact_url(url)!r} twice: give each endpoint once")
                seen.add(url.rstrip("/"))
            if self.api_key is not None and self.api_key_env:
                raise ValueError("give api_key or api_key_env, not both")
            if self.basic_auth is not None and (self.api_key is not None or self.api_key_env):
                raise ValueError(
                    "give basic auth (user:password@ in base_url, or basic_auth) or a bearer token "
                    "(api_key, api_key_env), not both"
                )
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

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)

    generator: EngineConfig = Field(default_factory=EngineConfig, description="Writes rubrics (DR-Generator).")
    verifier: EngineConfig = Field(default_factory=EngineConfig, description="Frozen yes/no judge (DR-Verifier).")
    policy: EngineConfig = Field(default_factory=EngineConfig, description="Answers prompts (DR-Policy).")


def _explain(exc: ValidationError, source: str) -> ConfigError:
    lines = [f"{source}: invalid engine config"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return ConfigError("\n".join(lines))


def _parse_error(exc: Exception) -> str:
    """Where and why a file did not parse, without the snippet of its text PyYAML quotes (it may hold a key)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context or 'syntax error'} (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    return type(exc).__name__


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
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigError(f"{path}: not valid {kind}: {_parse_error(exc)}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys among {', '.join(ENGINE_ROLES)}")
    try:
        return EnginesConfig(**data)
    except ValidationError as exc:
        raise _explain(exc, str(path)) from None
