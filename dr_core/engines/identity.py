"""A model's identity for artifacts and cache keys (``model_id``): what a stored row names as its model, and what a
step's cache key sees instead of a checkpoint's location; ``ModelIds``: the three roles' at once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dr_core.config import EngineConfig, EnginesConfig, redact_url
from dr_core.model import is_bundled, model_identity
from dr_core.paths import update_from_file

#: Files of a checkpoint directory that record how it was made, not what it is: a run record (the trainer's
#: result.json: timings, scratch paths) would give the same weights another identity when an update is re-done.
_NOT_MODEL = frozenset({"result.json", "trainer_state.json", "training_args.bin"})


@lru_cache(maxsize=64)
def _dir_fingerprint(path: str) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.name in _NOT_MODEL:
            continue
        if f.is_file() and (f.suffix in {".json", ".safetensors", ".bin", ".model", ".txt", ".jinja"}):
            h.update(f.name.encode())
            with f.open("rb") as fh:
                update_from_file(h, fh)
    return h.hexdigest()[:16]


def model_id(cfg: EngineConfig) -> str:
    """A model's identity for artifacts and cache keys: a bundled checkpoint by the GGUF hash it came from, a
    local checkpoint by a hash of its files, a served model by URL (never its credentials) and name.

    A list of endpoints is identified by all its URLs, sorted and joined by ","
    (``http://a/v1,http://b/v1#name``): the order of the list changes nothing, while adding, removing or swapping a
    replica gives a new identity, so results of one set of servers are never reused for another that may serve a
    different model (the name is often 'default': whatever each server serves). The price is a cache miss when a
    replica of the same model is added; the step's engine config changes then too, and that is in its cache key
    anyway. One URL keeps its identity of before."""
    if cfg.kind == "openai_http":
        return f"{','.join(sorted(redact_url(u) for u in cfg.base_urls))}#{cfg.model}"
    if is_bundled(cfg.model):
        return model_identity(cfg.model)
    return dir_identity(cfg.model)


def dir_identity(path: str | Path) -> str:
    """A local checkpoint directory's identity: its name and a hash of its files (configs, weights, tokenizer)."""
    return f"{Path(path).name}@{_dir_fingerprint(str(Path(path).expanduser().resolve()))}"


@dataclass(frozen=True)
class ModelIds:
    """The identity (``model_id``) of each role's model in a round: what its rows name and its cache keys see."""

    generator: str
    verifier: str
    policy: str

    @classmethod
    def of(cls, engines: EnginesConfig) -> ModelIds:
        return cls(**{role: model_id(getattr(engines, role)) for role in ("generator", "verifier", "policy")})
