"""Hash-pinned installs (issue 29, part 7): every pin of the four pinned requirements files carries pip's
``--hash=sha256:...`` options, every installer installs its file with ``--require-hashes``, and pip really refuses a
wheel whose bytes are not the pinned ones. No network: the wheel is a tiny one made here, installed with
``--no-index --find-links`` and no pip configuration.

The hashes are written by ``.venv/bin/python infra/pin_hashes.py`` (it needs the network; not run here).

    .venv/bin/python -m pytest -q tests/unit/test_requirement_hashes.py
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dr_core.paths import REPO_DIR
from infra import pin_hashes

INSTALLERS = {  # installer -> the requirements file it installs
    "infra/install.sh": "infra/requirements-cpu.txt",
    "infra/k8s/install-worker.sh": "infra/k8s/requirements-worker.txt",
    "infra/verifiers/install.sh": "infra/verifiers/requirements.txt",
    "infra/nemo-gym/install.sh": "infra/nemo-gym/requirements.txt",
}
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
MISMATCH = "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE"


def _logical_lines(path: Path) -> list[str]:
    """The file's requirement lines as pip reads them: continuations joined, comments and blank lines left out."""
    text = path.read_text()
    assert "\\\n#" not in text and not text.rstrip().endswith("\\"), f"{path}: a continuation runs into a comment"
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_regeneration_script_covers_every_installed_file():
    assert sorted(pin_hashes.FILES) == sorted(INSTALLERS.values())


@pytest.mark.parametrize("name", sorted(INSTALLERS.values()))
def test_every_pin_carries_a_sha256_hash(name):
    lines = _logical_lines(REPO_DIR / name)
    assert len(lines) > 100, f"{name}: expected a full resolution"
    for line in lines:
        requirement, *options = line.split()
        assert PIN.match(requirement), f"{name}: not a name==version pin: {line[:80]}"
        assert options, f"{name}: {requirement} has no --hash"
        assert all(HASH.match(o) for o in options), f"{name}: {requirement}: only --hash=sha256:<64 hex> allowed"
        assert len(set(options)) == len(options), f"{name}: {requirement} repeats a hash"


@pytest.mark.parametrize("name", sorted(INSTALLERS.values()))
def test_files_are_as_the_script_writes_them(name):
    """Comment header, pin order and layout are what infra/pin_hashes.py keeps and writes (re-rendering with the
    file's own hashes gives the file back), so a regeneration's diff shows only changed hashes."""
    text = (REPO_DIR / name).read_text()
    entries = pin_hashes.parse(text)
    hashes = {
        e.requirement: [w.removeprefix("--hash=sha256:") for w in " ".join(e.lines).split() if w.startswith("--hash=")]
        for e in entries
        if e.requirement
    }
    assert pin_hashes.render(entries, hashes) == text
    assert entries[0].requirement is None and entries[0].lines[0].startswith("# "), f"{name}: lost its header"


@pytest.mark.parametrize("installer", sorted(INSTALLERS))
def test_installers_require_hashes(installer):
    """Each installer installs its own file through infra/venv-lib.sh's pip_pinned, once; pip_pinned is the one pip
    line with -r, and it has --require-hashes and --no-deps; the editable installs of the project stay without."""
    script = (REPO_DIR / installer).read_text()
    assert 'source "$root/infra/venv-lib.sh"' in script
    assert f'req="$root/{INSTALLERS[installer]}"' in script
    assert [line.strip() for line in script.splitlines() if "pip_pinned" in line] == ['pip_pinned "$venv" "$req"']
    commands = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not [c for c in commands if "pip install" in c], f"{installer}: pip installs go through infra/venv-lib.sh"
    lib = (REPO_DIR / "infra" / "venv-lib.sh").read_text().splitlines()
    installs = [line for line in lib if "pip install" in line and "-r " in line]
    assert len(installs) == 1, "infra/venv-lib.sh: expected one `pip install ... -r` line"
    assert "--require-hashes" in installs[0] and "--no-deps" in installs[0]
    assert all("--require-hashes" not in line for line in lib if "pip install" in line and line not in installs)


def _wheel(directory: Path, body: str) -> Path:
    """A minimal valid pure-Python wheel, dr_hash_probe 1.0, whose module holds `body`."""
    files = {
        "dr_hash_probe.py": body.encode(),
        "dr_hash_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: dr-hash-probe\nVersion: 1.0\n",
        "dr_hash_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("dr_hash_probe-1.0.dist-info/RECORD,,")
    files["dr_hash_probe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / "dr_hash_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
    return path


def _pip_install(req: Path, wheels: Path, target: Path) -> subprocess.CompletedProcess:
    """The installers' command (--no-deps --require-hashes -r), from `wheels` only, no pip configuration at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "--no-index"]
    command += ["--find-links", str(wheels), "--target", str(target), "-r", str(req)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_pip_refuses_a_tampered_wheel_and_installs_the_pinned_one(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pinned = _wheel(wheels, "VALUE = 'pinned'\n")
    sha = hashlib.sha256(pinned.read_bytes()).hexdigest()
    req = tmp_path / "requirements.txt"
    req.write_text(
        f"# a hashed pin, as infra/pin_hashes.py writes it\ndr-hash-probe==1.0 \\\n    --hash=sha256:{sha}\n"
    )

    ok = _pip_install(req, wheels, tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "dr_hash_probe.py").read_text() == "VALUE = 'pinned'\n"

    # same name, same version, other bytes: a substituted or tampered wheel
    _wheel(wheels, "VALUE = 'tampered'\n")
    assert hashlib.sha256(pinned.read_bytes()).hexdigest() != sha
    bad = _pip_install(req, wheels, tmp_path / "bad")
    assert bad.returncode != 0
    assert MISMATCH in bad.stderr, bad.stderr
    assert sha in bad.stderr  # pip names the expected hash and the one it got
    assert not (tmp_path / "bad" / "dr_hash_probe.py").exists()


def test_pip_refuses_a_pin_without_a_hash_in_require_hashes_mode(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "VALUE = 1\n")
    req = tmp_path / "requirements.txt"
    req.write_text("dr-hash-probe==1.0\n")
    result = _pip_install(req, wheels, tmp_path / "t")
    assert result.returncode != 0
    assert "Hashes are required in --require-hashes mode" in result.stderr, result.stderr
