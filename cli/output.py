"""What every command shows the user: the stdout and stderr consoles, styled lines, and the one error path.

One error path: a project error (any ``DRError``, a refused configuration, an unreadable file; ``project_errors()``)
raised anywhere below a command is printed as ONE line on stderr (``error: ...``, user text printed verbatim, never
read as markup) and exits 2. ``--debug`` (or ``DR_DEBUG=1``) shows its traceback instead (``Invocation``, click's
``ctx.obj``). Anything else is a bug: its traceback and exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import click
import typer
from rich.console import Console
from rich.text import Text

# User text (SQL, file names, ids, model output) is printed verbatim: markup off everywhere; styles are explicit.
console = Console(markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)


@dataclass(frozen=True)
class Invocation:
    """What the root options say for one ``dr`` invocation, kept as click's ``ctx.obj`` (``debug_of`` reads it)."""

    debug: bool = False


def debug_of(ctx: click.Context | None) -> bool:
    """True when this invocation asked for tracebacks (``--debug`` / ``DR_DEBUG``)."""
    obj = ctx.find_root().obj if ctx is not None else None
    return isinstance(obj, Invocation) and obj.debug


def project_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the user must fix something" (exit 2): every project error (``DRError``), a
    configuration pydantic refused, and a file the system refused (``OSError`` names it)."""
    from pydantic import ValidationError

    from dr_core.errors import DRError

    return (DRError, ValidationError, OSError)


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
