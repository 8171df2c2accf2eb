"""Every configuration of dynamicrubric in one package, importable without torch, TRL or Prefect:

- ``engines``: one model engine per role (``EngineConfig``, ``EnginesConfig``), secrets, the engines file.
- ``round``: a round (``RoundConfig``, ``ScaleConfig``), the in-loop policy evaluation (``PolicyEvalConfig``),
  Algorithm 1 (``CoevolveConfig``).
- ``training``: one GRPO update (``GRPOSettings``) and where it trains (``LaunchSettings``).
- ``service``: the reward service (``ServiceSettings``).
- ``presets``: the shipped presets (data in ``presets.yaml``): ``preset``, ``coevolve_preset``.
- ``numerics``: the dtype ``auto`` resolves to on this machine, and the run's numerics line.
- ``runtime``: the environment defaults of an embedded run (Prefect's home, vLLM's in-process engine).

The names most callers need are importable from the package itself: ``from dr_core.config import EngineConfig``.
"""

from dr_core.config.engines import (
    AUTH_FIELDS,
    DEFAULT_MODEL,
    REDACTED,
    SECRET_FIELDS,
    ConfigError,
    EngineConfig,
    EngineKind,
    EnginesConfig,
    VerdictMode,
    VerifierPrompt,
    engine_config,
    is_redacted,
    load_engines_config,
    redact_url,
    split_url_credentials,
)
from dr_core.config.presets import PRESET_NAMES, coevolve_preset, preset
from dr_core.config.round import CoevolveConfig, PolicyEvalConfig, RoleResources, RoundConfig, ScaleConfig
from dr_core.config.training import GRPOSettings, LaunchSettings

__all__ = [
    "AUTH_FIELDS",
    "DEFAULT_MODEL",
    "PRESET_NAMES",
    "REDACTED",
    "SECRET_FIELDS",
    "CoevolveConfig",
    "ConfigError",
    "EngineConfig",
    "EngineKind",
    "EnginesConfig",
    "VerdictMode",
    "VerifierPrompt",
    "GRPOSettings",
    "LaunchSettings",
    "PolicyEvalConfig",
    "RoleResources",
    "RoundConfig",
    "ScaleConfig",
    "coevolve_preset",
    "engine_config",
    "is_redacted",
    "load_engines_config",
    "preset",
    "redact_url",
    "split_url_credentials",
]
