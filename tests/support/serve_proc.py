"""A real ``dr serve`` process on 127.0.0.1 for tests: started with ``python -m cli.main serve``, waited for until
``GET /ready`` answers 200, stopped by its process id (SIGTERM, then SIGKILL of its group).

    with ServeProcess(tmp_path, engines=yaml_path, store=store_dir) as srv:
        httpx.post(f"{srv.url}/v1/score-set", json=...)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.netutil import free_port, kill_group, wait_for_http

ROOT = Path(__file__).resolve().parents[2]


def engines_file(path: Path, base_url: str, attempts: int = 1) -> Path:
    """An engines file whose generator and verifier are the OpenAI-compatible server at ``base_url``."""
    path.write_text(
        f"generator: {{kind: openai_http, base_url: '{base_url}', attempts: {attempts}}}\n"
        f"verifier: {{kind: openai_http, base_url: '{base_url}', attempts: {attempts}}}\n"
    )
    return path


class ServeProcess:
    def __init__(
        self,
        workdir: Path,
        *,
        store: Path | str,
        engines: Path | None = None,
        args: tuple = (),
        env: dict | None = None,
        port: int | None = None,
        ready_timeout: float = 120.0,
    ):
        self.workdir, self.store, self.engines, self.args = Path(workdir), store, engines, tuple(args)
        self.env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"serve-{self.port}-{self.starts}.log"

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob(f"serve-{self.port}-*.log")))

    def start(self, *, wait: bool = True, env: dict | None = None) -> "ServeProcess":
        self.starts += 1
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "serve",
            "--store",
            str(self.store),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]
        if self.engines is not None:
            cmd += ["--engines", str(self.engines)]
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        if wait:
            wait_for_http(
                f"{self.url}/ready", timeout=self.ready_timeout, what="dr serve", proc=self.proc, log=self.log_path
            )
        return self

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)
                self.proc.wait(10)
        kill_group(self.proc)
        return self.proc.returncode

    def client(self, token: str | None = None, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self) -> "ServeProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
