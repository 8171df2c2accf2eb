"""The store's one error type, and the one-line cause it quotes for a failure underneath (S3, DuckDB)."""

from __future__ import annotations

from dr_core.errors import DRError


class StoreError(DRError, RuntimeError):
    """The store cannot be used as asked: one line naming the store (and the S3 endpoint) and the cause."""


def short_cause(exc: BaseException) -> str:
    """A short cause for a failure (an S3 call, a DuckDB view): the exception's type and the first line of its text."""
    seen, e = set(), exc
    while e.__cause__ is not None and id(e) not in seen and not str(e).strip():  # s3fs wraps; show the inner one
        seen.add(id(e))
        e = e.__cause__
    text = (str(e).strip().splitlines() or [""])[0][:240]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
