"""Layout and layering, as rules over every import of the project's code (module level and inside functions).

The layers: cli -> flows -> tasks -> dr_core, and no arrow runs back up. Inside dr_core each heavy or external
stack has one home: trl/peft in train/, vllm in engines/, DuckDB and the filesystems in store/, Jinja2 in report/;
scoring/ is pure numpy. Each rule is checked on the source (``_violations``) and, where import time matters, on what
a fresh interpreter actually loads.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dr_core", "tasks", "flows", "cli")


def test_top_level_layout():
    for name in ["pyproject.toml", "README.md", "flows", "tasks", "dr_core", "sql", "infra", "tests", ".ci/run", "cli"]:
        assert (ROOT / name).exists(), name
    for sub in [
        "scoring",
        "rubric",
        "engines",
        "evaluator",
        "store",
        "train",
        "runs",
        "evals",
        "report",
        "data",
        "service",
    ]:
        assert (ROOT / "dr_core" / sub / "__init__.py").is_file(), sub
    assert (ROOT / "dr_core" / "config" / "presets.yaml").is_file()  # the presets are data, in the config package
    top = sorted(p.stem for p in (ROOT / "dr_core").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, (
        f"{len(top)} top-level modules in dr_core (at most 8; move the rest where they are used): {top}"
    )


#: Limits that keep each module and function readable in one sitting (the tests themselves are exempt).
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 60


def _lengths(path: Path) -> tuple[int, list[tuple[str, int]]]:
    """A module's line count and (name:line, length) of each function longer than the limit, counted from its first
    decorator to its last line (a nested function counts on its own and inside its parent)."""
    text = path.read_text(encoding="utf-8")
    long = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                long.append((f"{node.name}:{node.lineno}", node.end_lineno - first + 1))
    return len(text.splitlines()), long


def _project_python() -> list[Path]:
    return sorted(p for d in (*PACKAGES, "infra") for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_or_function_outgrows_a_reading():
    too_long = {}
    for path in _project_python():
        lines, long = _lengths(path)
        if lines > MAX_MODULE_LINES or long:
            too_long[str(path.relative_to(ROOT))] = {"lines": lines, "functions": long}
    assert not too_long, f"split these along a seam you can name in a word: {too_long}"


def test_the_length_rule_can_fail(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    planted = tmp_path / "long.py"
    planted.write_text(f"@decorator\ndef f():\n{body}\n\ndef g():\n    return 1\n")
    lines, long = _lengths(planted)
    assert long == [("f:2", MAX_FUNCTION_LINES + 2)] and lines == MAX_FUNCTION_LINES + 6


#: A docstring opens with its purpose in one sentence of at most this many characters (about a line); the shapes,
#: units and the why follow it.
MAX_PURPOSE_CHARS = 150


def _long_purposes(path: Path) -> list[str]:
    """``name:line`` of each docstring in ``path`` whose first sentence is over ``MAX_PURPOSE_CHARS``."""
    long = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            flat = " ".join(ast.get_docstring(node).split())
            first = re.match(r"(.+?[.:;])(\s|$)", flat)
            if len(first.group(1) if first else flat) > MAX_PURPOSE_CHARS:
                long.append(f"{node.name}:{node.lineno}")
    return long


def test_each_docstring_opens_with_its_purpose_in_a_sentence():
    long = {
        str(p.relative_to(ROOT)): found
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if (found := _long_purposes(p))
    }
    assert not long, (
        f"say what it is for in one sentence of at most {MAX_PURPOSE_CHARS} characters, then the rest: {long}"
    )


def test_the_purpose_rule_can_fail(tmp_path):
    planted = tmp_path / "doc.py"
    words = " ".join(["word"] * 40)
    planted.write_text(f'def f():\n    """{words}. Short."""\n\n\ndef g():\n    """Short. {words}."""\n')
    assert _long_purposes(planted) == ["f:1"]


#: A Prefect task takes at most this many positional parameters; more travel as one frozen inputs model.
MAX_TASK_POSITIONAL = 6


def _wide_tasks(path: Path) -> list[str]:
    """``name:count`` of each ``@task`` function in ``path`` with more than ``MAX_TASK_POSITIONAL`` positional
    parameters."""
    wide = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            is_task = any(ast.unparse(d).split("(")[0] in ("task", "prefect.task") for d in node.decorator_list)
            count = len(node.args.posonlyargs) + len(node.args.args)
            if is_task and count > MAX_TASK_POSITIONAL:
                wide.append(f"{node.name}:{count}")
    return wide


def test_no_task_takes_more_than_six_positional_parameters(tmp_path):
    wide = {str(p.relative_to(ROOT)): w for p in sorted((ROOT / "tasks").rglob("*.py")) if (w := _wide_tasks(p))}
    assert not wide, f"pass these as one frozen inputs model (dr_core/runs/refs.py): {wide}"
    planted = tmp_path / "wide.py"
    planted.write_text(
        "@task(name='w')\ndef w(a, b, c, d, e, f, g):\n    pass\n\n\ndef plain(a, b, c, d, e, f, g):\n    pass\n"
    )
    assert _wide_tasks(planted) == ["w:7"]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _sources() -> dict[str, Path]:
    return {_module(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(imported module, names imported from it) for every import statement in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (use absolute imports)"
            out.append((node.module, [a.name for a in node.names]))
    return out


def _targets(module: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The modules an import reaches: ``from pkg import mod`` reaches pkg.mod when that is a module."""
    return [module, *(f"{module}.{n}" for n in names if f"{module}.{n}" in known)]


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _violations(rule, sources: dict[str, Path] | None = None) -> list[str]:
    """'file: imports X (why)' for every import that ``rule(module, target, names)`` objects to."""
    sources = sources or _sources()
    known = {**_sources(), **sources}
    bad = []
    for mod, path in sources.items():
        for imported, names in _imports(path):
            for target in _targets(imported, names, known):
                why = rule(mod, target, names)
                if why:
                    bad.append(
                        f"{path.relative_to(ROOT) if ROOT in path.parents else path.name}: imports {target} ({why})"
                    )
    return sorted(set(bad))


#: Third-party stacks with exactly one home in the project.
HOMES = {
    "trl": "dr_core.train",
    "peft": "dr_core.train",
    "deepspeed": "dr_core.train",
    "accelerate": "dr_core.train",
    "vllm": "dr_core.engines",
    "duckdb": "dr_core.store",
    "fsspec": "dr_core.store",
    "s3fs": "dr_core.store",
    "botocore": "dr_core.store",
    "jinja2": "dr_core.report",
    "markupsafe": "dr_core.report",
    "typer": "cli",
    "rich": "cli",
    "click": "cli",
    "fastapi": "dr_core.service",
    "starlette": "dr_core.service",
    "uvicorn": "dr_core.service",
}


@pytest.mark.parametrize("stack", sorted(HOMES))
def test_each_stack_is_imported_only_in_its_home(stack):
    home = HOMES[stack]
    assert not _violations(
        lambda mod, target, _: _within(target, stack) and not _within(mod, home) and f"only {home} may import {stack}"
    )


def test_layers_point_down_only():
    """dr_core imports no tasks/flows/cli/prefect; tasks no flows/cli; flows no cli; nothing imports cli."""
    above = {"dr_core": ("tasks", "flows", "cli", "prefect"), "tasks": ("flows", "cli"), "flows": ("cli",)}

    def rule(mod, target, _):
        for layer, forbidden in above.items():
            if _within(mod, layer) and any(_within(target, f) for f in forbidden):
                return f"{layer} sits below {target.split('.')[0]}"
        return None

    assert not _violations(rule)


def test_scoring_is_pure():
    """scoring/ imports nothing of the project but itself and the leaf constants; constants imports nothing."""

    def rule(mod, target, _):
        project = target.split(".")[0] in PACKAGES
        if (
            _within(mod, "dr_core.scoring")
            and project
            and not (_within(target, "dr_core.scoring") or target in ("dr_core", "dr_core.constants"))
        ):
            return "scoring is pure numpy"
        if mod == "dr_core.constants" and project and target != "dr_core":
            return "constants is a leaf"
        return None

    assert not _violations(rule)


def test_a_flow_uses_another_flow_only_as_a_subflow():
    """Flows share code through flows.steps, flows.runners (task runners) and flows.artifacts (Prefect artifacts)
    only; from another flow's module a flow may take the flow itself and its parameter model (a subflow), nothing
    else."""
    shared = ("flows.steps", "flows.runners", "flows.artifacts", "flows")

    def rule(mod, target, names):
        if not (_within(mod, "flows") and _within(target, "flows")) or target in shared or target == mod:
            return None
        helpers = [n for n in names if not (n.endswith("_flow") or n.endswith("Params"))]
        return f"helpers {helpers} belong in flows.steps" if helpers or not names else None

    assert not _violations(rule)


def test_store_internals_stay_in_the_store():
    """Only dr_core/store touches a Store's filesystem (``.fs``) or its path mapping (``._path``)."""
    bad = []
    for mod, path in _sources().items():
        if _within(mod, "dr_core.store"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in {"fs", "_path", "_put", "_uri"}:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not bad, bad


def _loaded_after(imports: list[str]) -> set[str]:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in imports)
        + "print(' '.join(sorted({k.split('.')[0] for k in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_importing_dr_core_loads_no_prefect():
    mods = [m for m in _sources() if _within(m, "dr_core")]
    assert len(mods) > 30
    assert "prefect" not in _loaded_after(mods)


def test_config_and_the_cli_load_no_model_stack():
    """Loading a config (presets) or starting ``dr`` loads no trainer, engine, orchestrator or database."""
    heavy = {"torch", "trl", "peft", "vllm", "transformers", "prefect", "duckdb", "jinja2"}
    assert not _loaded_after(["dr_core.config", "dr_core.config.service", "dr_core.config.runtime"]) & heavy
    assert not _loaded_after(["cli.main"]) & heavy
    assert not _loaded_after(["dr_core.scoring.equations", "dr_core.scoring.metrics", "dr_core.scoring.signals"]) & (
        heavy | {"pyarrow", "pydantic"}
    )


def test_the_rules_catch_a_violation(tmp_path):
    """The checker itself can fail: planted imports, lazy ones included, are each reported."""
    planted = tmp_path / "planted.py"
    planted.write_text("from tasks import options\n\ndef f():\n    import trl\n    from flows.round import measure\n")
    fake = {"dr_core.scoring.planted": planted}
    assert _violations(lambda mod, target, _: _within(target, "tasks") and "up", fake) == [
        "planted.py: imports tasks (up)",
        "planted.py: imports tasks.options (up)",
    ]
    assert _violations(lambda mod, target, _: _within(target, "trl") and "trl", fake) == [
        "planted.py: imports trl (trl)"
    ]
    flows_fake = {"flows.planted": planted}
    assert _violations(
        lambda mod, target, names: _within(target, "flows.round") and names == ["measure"] and "helper", flows_fake
    ) == ["planted.py: imports flows.round (helper)"]
