"""The shipped presets: ``tiny`` (CPU, default model, minutes) and ``paper`` (the paper's appendix D settings, for
GPU machines), kept as data in dr_core/config/presets.yaml and validated into the typed configs of
dr_core/config/round.py when asked for.

    python -c "from dr_core.config import preset; print(preset('tiny').model_dump_json(indent=1))"
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from dr_core.config.engines import EngineConfig
from dr_core.config.round import CoevolveConfig, RoundConfig

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
