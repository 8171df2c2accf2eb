"""Every project error derives from one base, ``dr_core.errors.DRError``, and the CLI prints any of them as one line."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dr_core.errors import DRError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dr_core", "tasks", "flows", "cli", "infra")
BUILTIN_ERRORS = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _exception_classes() -> dict[str, tuple[str, set[str]]]:
    """{class name: (file, its base names)} for every class of the project's code that subclasses an exception."""
    classes: dict[str, tuple[str, set[str]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    classes[node.name] = (str(path.relative_to(ROOT)), {_base_name(b) for b in node.bases})
    errors: dict[str, tuple[str, set[str]]] = {}
    grew = True
    while grew:  # a class is an exception if a base is a built-in exception or a project exception class
        grew = False
        for name, (where, bases) in classes.items():
            if name not in errors and bases & (BUILTIN_ERRORS | set(errors) | {"DRError"}):
                errors[name], grew = (where, bases), True
    return errors


def test_every_project_exception_derives_from_drerror():
    errors = _exception_classes()
    assert {"DataError", "EngineError", "LaunchError", "BadRequest", "OutputPathError"} <= set(errors)
    derived, grew = {"DRError"}, True
    while grew:
        grew = False
        for name, (_, bases) in errors.items():
            if name not in derived and bases & derived:
                derived.add(name)
                grew = True
    outside = sorted(f"{where}: {name}" for name, (where, _) in errors.items() if name not in derived)
    assert not outside, "exceptions that do not derive from dr_core.errors.DRError:\n" + "\n".join(outside)


def test_errors_keep_their_builtin_kind_for_the_retry_rules():
    from dr_core.datasets import DataError
    from dr_core.engines.base import EngineError
    from dr_core.store.atomic import OutputPathError
    from tasks.options import is_transient

    assert issubclass(DataError, ValueError) and not is_transient(DataError("sets.jsonl", 3, "prompt", "missing"))
    assert issubclass(EngineError, RuntimeError) and is_transient(EngineError("server down"))
    err = OutputPathError(21, "out.json is a directory", "out.json")
    assert isinstance(err, OSError) and isinstance(err, DRError) and err.filename == "out.json"


@pytest.mark.parametrize("debug", [False, True])
def test_the_cli_prints_any_project_error_as_one_line_unless_debug(debug):
    from cli.app import _Commands
    from cli.output import Invocation
    from dr_core.train.runner import LaunchError  # not one of the kinds the CLI used to list one by one

    app = typer.Typer(cls=_Commands)

    @app.callback()
    def root(ctx: typer.Context) -> None:
        ctx.obj = Invocation(debug=debug)

    @app.command()
    def boom() -> None:
        raise LaunchError("rank 1 ran out of memory; its log: launch.log")

    res = CliRunner().invoke(app, ["boom"])
    if debug:
        assert isinstance(res.exception, LaunchError) and res.exit_code == 1
    else:
        assert res.exit_code == 2 and res.output.strip() == "error: rank 1 ran out of memory; its log: launch.log"
