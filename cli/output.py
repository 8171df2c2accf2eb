"""What every command shows the user: the stdout and stderr consoles, styled lines, and the one error path.

One error path: a project error (bad input, config, model, engine, store or query; ``project_errors()``) raised
anywhere below a command is printed as ONE line on stderr (``error: ...``, user text printed verbatim, never read
as markup) and exits 2. ``--debug`` (or ``DR_DEBUG=1``) shows its traceback instead (``DEBUG``). Anything else is a
bug: its traceback and exit 1.
"""

from __future__ import annotations

import os

import typer
from rich.console import Console
from rich.text import Text

#: Set by ``--debug`` / ``DR_DEBUG``: re-raise project errors with their traceback.
DEBUG = {"on": os.environ.get("DR_DEBUG", "").lower() in ("1", "true", "yes")}

# User text (SQL, file names, ids, model output) is printed verbatim: markup off everywhere; styles are explicit.
console = Console(markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)


def project_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the user must fix something" (exit 2), imported lazily (no torch, no vllm)."""
    from pydantic import ValidationError

    from dr_core.config import ConfigError
    from dr_core.datasets import DataError
    from dr_core.engines.base import EngineError
    from dr_core.model import ModelError
    from dr_core.report.collect import ReportError
    from dr_core.runs.ingest import CommandError
    from dr_core.runs.reward_model import RewardModelError
    from dr_core.service.server import ServeError
    from dr_core.store.artifacts import StoreError
    from dr_core.store.sql import QueryError

    return (
        DataError,
        ConfigError,
        EngineError,
        ModelError,
        RewardModelError,
        QueryError,
        StoreError,
        CommandError,
        ReportError,
        ServeError,
        ValidationError,
        OSError,
    )


def error_line(exc: BaseException) -> str:
    """One line for a project error: its message with line breaks folded to '; ' (an OSError names its file)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):  # "invalid RoundConfig: k: Input should be ...; foo: Extra inputs ..."
        details = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        return f"invalid {exc.title}: {details}"
    if (
        type(exc) in (OSError, PermissionError, FileNotFoundError, IsADirectoryError, NotADirectoryError)
        and exc.filename
        and exc.strerror
    ):
        return f"{exc.filename}: {exc.strerror}"  # not "[Errno 13] Permission denied: 'path'"
    return str(exc) or type(exc).__name__  # fail() folds a multi-line message into one line


def styled(*parts) -> Text:
    """A line from (text, style) pairs and plain strings: styles without parsing user text as markup."""
    return Text.assemble(*parts)


def log(message: str) -> None:
    """A dim progress line on stderr (the model commands' ``log`` callback)."""
    err_console.print(styled((message, "dim")), soft_wrap=True)


def check_output_path(path, what: str) -> None:
    """Refuse an output path that cannot be written (a directory, under a file, unwritable) before any work."""
    from dr_core.store.atomic import check_output_path as check

    try:
        check(path, what)
    except OSError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> None:
    """Print a clear one-line error on stderr and exit non-zero (nothing has been written)."""
    one_line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    err_console.print(styled(("error: ", "bold red"), one_line), soft_wrap=True)
    raise typer.Exit(code)
