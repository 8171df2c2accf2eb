"""Where and as whom a store reaches S3, and how long it waits: ``S3Options`` (``Store.from_url`` builds one from
the environment unless given one). Keys are read here and handed to s3fs only; ``repr`` never shows them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dr_core.store.errors import StoreError


def _env_number(name: str, default: float, kind=float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise StoreError(f"{name}={raw!r} is not a {'whole ' if kind is int else ''}number") from None
    if value <= 0:
        raise StoreError(f"{name}={raw!r} must be > 0")
    return value


@dataclass(frozen=True)
class S3Options:
    """Where and as whom to reach S3, and how long to wait. Secrets are excluded from ``repr`` so they never reach
    a log line.

    Budget of one S3 call: a connection must open within ``connect_timeout_s`` (``DR_S3_CONNECT_TIMEOUT``, 5 s), a
    reply must start within ``read_timeout_s`` (``DR_S3_READ_TIMEOUT``, 10 s). A timed-out or throttled call is
    tried ``attempts`` times in all (``DR_S3_ATTEMPTS``, 3; s3fs's back-off, 0.1 s then 0.17 s); botocore's own
    retries are off, so the budget is not multiplied. A refused connection, a wrong key or a missing bucket is not
    retried. Worst case for an endpoint that accepts but never answers: 3 x 10 s.
    """

    endpoint_url: str | None = None
    region: str | None = None
    key: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    attempts: int = 3

    @classmethod
    def from_env(cls) -> "S3Options":
        env = os.environ.get
        return cls(
            endpoint_url=env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL"),
            region=env("AWS_REGION") or env("AWS_DEFAULT_REGION"),
            key=env("AWS_ACCESS_KEY_ID"),
            secret=env("AWS_SECRET_ACCESS_KEY"),
            connect_timeout_s=_env_number("DR_S3_CONNECT_TIMEOUT", 5.0),
            read_timeout_s=_env_number("DR_S3_READ_TIMEOUT", 10.0),
            attempts=int(_env_number("DR_S3_ATTEMPTS", 3, int)),
        )

    def filesystem(self):
        import s3fs

        client_kwargs = {"region_name": self.region} if self.region else {}
        # Listings are not cached: another process (a Prefect worker) may have written since the last look.
        fs = s3fs.S3FileSystem(
            key=self.key,
            secret=self.secret,
            endpoint_url=self.endpoint_url,
            client_kwargs=client_kwargs,
            config_kwargs={
                "connect_timeout": self.connect_timeout_s,
                "read_timeout": self.read_timeout_s,
                "retries": {"total_max_attempts": 1, "mode": "standard"},
            },
            use_listings_cache=False,
            skip_instance_cache=True,
        )
        fs.retries = self.attempts  # s3fs's retry loop (timeouts, throttling): the one retry budget
        return fs

    @property
    def endpoint(self) -> str:
        return self.endpoint_url or "the AWS default endpoint"
