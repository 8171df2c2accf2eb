"""``dr serve`` without the CLI: check everything cheap first (who can reach it, engines file, store writable, token
file, port free), then serve on uvicorn while the engines load in the background (``/health`` answers at once,
``/ready`` once they are loaded). SIGINT / SIGTERM stop it after the running batch.

    dr serve --engines engines.yaml --store s3://bucket/dr --host 127.0.0.1 --port 8321 --token-file token.txt

Safe by default: on an address other machines can reach (anything but 127.0.0.0/8, ::1 and ``localhost``) it
refuses to start without ``--token-file``, unless ``--insecure-no-token`` says so, and then warns on every start
(``check_exposure``, before anything else is checked or loaded).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
from pathlib import Path
from typing import Callable

from dr_core.config import EnginesConfig
from dr_core.config.service import ServiceSettings
from dr_core.errors import DRError
from dr_core.store.artifacts import Store

Log = Callable[[str], None]


class ServeError(DRError, ValueError):
    """``dr serve`` cannot start as asked (the message says what to fix)."""


def read_token(path: str | Path | None) -> str | None:
    """The bearer token in ``path`` (its first line, stripped); ServeError if unreadable or empty. The token itself
    never appears in a message."""
    if path is None:
        return None
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(
            f"{p}: cannot read the token file ({getattr(exc, 'strerror', None) or type(exc).__name__})"
        ) from None
    token = (text.strip().splitlines() or [""])[0].strip()
    if not token:
        raise ServeError(f"{p}: the token file is empty")
    if len(token) < 16:
        raise ServeError(
            f"{p}: the token is shorter than 16 characters; use a random one "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: ``localhost``, 127.0.0.0/8, ::1 (or ::ffff:127.x.y.z).
    Any other name, and the wildcard addresses (``0.0.0.0``, ``::``, empty), can be reached from the network."""
    h = host.strip().strip("[]").lower().rstrip(".")
    if h == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def check_exposure(host: str, token_file: str | Path | None, insecure_no_token: bool = False) -> str | None:
    """Whether ``dr serve`` may listen on ``host`` as asked: ServeError (one line naming the address and the two
    ways out) for a non-loopback address without a token file or ``--insecure-no-token``; the warning line to log
    when it serves a non-loopback address unauthenticated (``--insecure-no-token``); None otherwise."""
    if token_file is not None or is_loopback(host):
        return None
    if not insecure_no_token:
        raise ServeError(
            f"--host {host} is reachable from other machines and no --token-file was given: give --token-file FILE "
            "(clients then send its token as a bearer token) or, to serve it unauthenticated anyway, "
            "--insecure-no-token"
        )
    return (
        f"warning: --insecure-no-token: the scorer on {host} is unauthenticated and reachable from the network "
        "(anyone who can connect can score and write to the store); use --token-file to require a token"
    )


def check_port(host: str, port: int) -> None:
    if not 0 < port < 65536:
        raise ServeError(f"--port {port}: must be 1..65535")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise ServeError(f"cannot listen on {host}:{port}: {why}") from None


def serve(
    config: EnginesConfig,
    store_url: str | None,
    settings: ServiceSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8321,
    token_file: str | Path | None = None,
    log: Log = print,
    access_log: bool = False,
    insecure_no_token: bool = False,
) -> int:
    """Run the service until stopped; returns the exit code: 0 after SIGINT/SIGTERM (the running batch finished,
    the engines closed), 2 when the engines fail to start. ServeError, before anything starts, for a start-up input
    that cannot work (``check_exposure``, the token file, the store, the port)."""
    warning = check_exposure(host, token_file, insecure_no_token)
    if warning:  # first, on every start: before any other check can fail
        log(warning)
    import uvicorn

    from dr_core.engines.pool import EnginePool
    from dr_core.service.app import create_app
    from dr_core.service.intake import Service

    token = read_token(token_file)
    store = Store.from_url(store_url).check_writable()
    check_port(host, port)
    pool = EnginePool(log)

    def open_engines():
        engines = pool.open_roles(config, ("generator", "verifier"))
        return engines["generator"], engines["verifier"]

    service = Service(settings, store, open_engines, token=token, log=log, close_engines=pool.close)
    app = create_app(service)
    uv = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=access_log,
        timeout_graceful_shutdown=30,
        lifespan="on",
    )
    server = uvicorn.Server(uv)
    service.on_failure = lambda: setattr(server, "should_exit", True)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    log(
        f"serving on http://{host}:{port} (store {store.url}, run id {settings.run_id!r}"
        f"{', bearer token required' if token else ''}); loading the engines, GET /ready says when they are up"
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, restores the handlers it found and raises the signal again:
    # the CLI's handlers would turn that into exit 130/143 after a clean shutdown. Quiet handlers while it runs.
    previous = {sig: signal.signal(sig, lambda *_a: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 2 if service.failed else 0
