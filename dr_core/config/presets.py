"""The shipped presets: ``tiny`` (CPU, default model, minutes) and ``paper`` (the paper's appendix D settings, for
GPU machines), kept as data in dr_core/config/presets.yaml and validated into the typed configs of
dr_core/config/round.py when asked for.

The models of every command that runs them (``dr score``, ``eval-evaluator``, ``eval-policy``, ``serve``, ``round``,
``coevolve``, ``stale-fresh``) come from one place: ``roles(preset, engines_file)``, the engines file's roles when one
is given, else the preset's (``tiny`` by default). Each command says which in one line, ``models_line``::

    models: preset tiny — generator smollm2-135m-instruct, verifier qwen2.5-coder-0.5b-instruct (plain prompt,
    balanced verdicts), policy smollm2-135m-instruct

    python -c "from dr_core.config import preset; print(preset('tiny').model_dump_json(indent=1))"
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import yaml

from dr_core.config.engines import EngineConfig, EnginesConfig, load_engines_config, redact_url
from dr_core.config.round import CoevolveConfig, RoundConfig
from dr_core.constants import ENGINE_ROLES

#: The shipped presets' names (``preset``, ``coevolve_preset``).
PRESET_NAMES = ("tiny", "paper")
#: The presets' data.
PRESETS_FILE = Path(__file__).with_name("presets.yaml")


@lru_cache(maxsize=1)
def _data() -> dict:
    return yaml.safe_load(PRESETS_FILE.read_text(encoding="utf-8"))


def _engine(fields: dict) -> dict:
    """An engine's fields with ``kv_cache_gib_float32`` made ``kv_cache_gib`` for its resolved dtype (the same
    tokens in every dtype: a 2-byte dtype needs half the bytes)."""
    fields = dict(fields)
    gib = fields.pop("kv_cache_gib_float32", None)
    if gib is not None:
        dtype = EngineConfig(**fields).dtype
        fields["kv_cache_gib"] = gib / (1 if dtype == "float32" else 2)
    return fields


def _round_fields(name: str) -> dict:
    """A round preset's fields, built now: the engines' ``dtype: auto`` is resolved for this machine when it is
    built (dr_core/config/numerics.py), so a preset is data, not a config fixed at import."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    fields = dict(_data()[name]["round"])
    fields["engines"] = {role: _engine(e) for role, e in (fields.get("engines") or {}).items()}
    return fields


def preset(name: str, **overrides) -> RoundConfig:
    """A shipped preset, with field overrides validated like the preset itself."""
    base = RoundConfig(**_round_fields(name)).model_dump()
    if isinstance(overrides.get("scale"), dict):  # --set scale.shards=N keeps the preset's resources
        overrides = {**overrides, "scale": {**base["scale"], **overrides["scale"]}}
    return RoundConfig(**{**base, **overrides})


def _coevolve_base(name: str) -> dict:
    """A co-evolution preset's fields, its round built like ``preset``."""
    fields = dict(_data()[name]["coevolve"])
    return CoevolveConfig(**fields, round=preset(name)).model_dump()


def coevolve_preset(name: str, **overrides) -> CoevolveConfig:
    """A shipped co-evolution preset; ``overrides`` are fields of CoevolveConfig (``round`` overrides take a dict
    of RoundConfig fields merged into the preset's)."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    base = _coevolve_base(name)
    overrides = _follow_k(base, overrides)
    rnd = overrides.get("round")
    if isinstance(rnd, dict) and isinstance(rnd.get("scale"), dict):  # round.scale.shards keeps the resources
        overrides["round"] = {**rnd, "scale": {**base["round"]["scale"], **rnd["scale"]}}
    for key in ("round", "generator", "policy", "policy_eval"):
        if isinstance(overrides.get(key), dict):
            overrides[key] = {**(base[key] or {}), **overrides[key]}
    return CoevolveConfig(**{**base, **overrides})


def _follow_k(base: dict, overrides: dict) -> dict:
    """The policy's GRPO group is the set C: it follows an overridden ``round.k`` unless the caller set it, keeping
    the preset's number of groups per micro-step."""
    k = (overrides.get("round") or {}).get("k") if isinstance(overrides.get("round"), dict) else None
    if k is None or "num_generations" in (overrides.get("policy") or {}):
        return overrides
    groups = base["policy"]["per_device_train_batch_size"] // base["policy"]["num_generations"]
    pol = dict(overrides.get("policy") or {})
    pol.setdefault("num_generations", k)
    pol.setdefault("per_device_train_batch_size", groups * k)
    return {**overrides, "policy": pol}


# -- the models a command runs, and the one line that says which ---------------------------------------------------
def roles(preset_name: str = "tiny", engines_file: str | Path | None = None) -> EnginesConfig:
    """The models of a command: the engines file's roles when one is given (a role it leaves out gets the engine
    defaults), else the preset's. ValueError (ConfigError for a bad file) naming what to fix."""
    if engines_file is not None:
        return load_engines_config(engines_file)
    return preset(preset_name).engines


def roles_source(preset_name: str, engines_file: str | Path | None = None) -> str:
    """Where ``roles`` took the models from: ``engines file PATH`` or ``preset NAME``."""
    return f"engines file {engines_file}" if engines_file is not None else f"preset {preset_name}"


def engine_label(cfg: EngineConfig) -> str:
    """A role's model in a log line: a bundled model's registry name (``default`` resolved), a checkpoint
    directory as given, or a remote engine's served model name and its endpoints (credentials redacted)."""
    from dr_core.model import bundled, is_bundled

    if cfg.kind == "openai_http":
        return f"{cfg.model} at {', '.join(redact_url(u) or '' for u in cfg.base_urls)}"
    return bundled(cfg.model).name if is_bundled(cfg.model) else cfg.model


def verifier_label(cfg: EngineConfig) -> str:
    """The verifier's model and how it gives verdicts: ``qwen2.5-coder-0.5b-instruct (plain prompt, balanced
    verdicts)``."""
    return f"{engine_label(cfg)} ({cfg.verifier_prompt} prompt, {cfg.verdict_mode} verdicts)"


def models_line(source: str, parts: Iterable[tuple[str, str]]) -> str:
    """``models: SOURCE — WHO WHAT, WHO WHAT, ...``: the one line each model command logs before it loads a model."""
    return f"models: {source} — " + ", ".join(f"{who} {what}" for who, what in parts)


def engines_line(engines: EnginesConfig, source: str, which: Sequence[str] = ENGINE_ROLES) -> str:
    """The models line of the roles ``which`` of ``engines`` (the verifier with its prompt and verdict procedure)."""
    return models_line(
        source,
        (
            (role, verifier_label(cfg) if role == "verifier" else engine_label(cfg))
            for role in which
            for cfg in (getattr(engines, role),)
        ),
    )
