"""Layout and layering: the user's top-level names exist and dr_core never imports Prefect."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_top_level_layout():
    for name in ["pyproject.toml", "README.md", "flows", "tasks", "dr_core", "sql", "infra", "tests", ".ci/run"]:
        assert (ROOT / name).exists(), name


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_dr_core_imports_no_prefect_statically():
    offenders = [
        f"{p.relative_to(ROOT)}: {mod}"
        for p in (ROOT / "dr_core").rglob("*.py")
        for mod in _imports(p)
        if mod.split(".")[0] in {"prefect", "tasks", "flows"}
    ]
    assert not offenders, offenders


def test_importing_dr_core_loads_no_prefect():
    mods = [f"dr_core.{p.stem}" for p in (ROOT / "dr_core").glob("*.py") if p.stem != "__init__"]
    code = "import sys\n" + "".join(f"import {m}\n" for m in mods) + "print(any(k.split('.')[0]=='prefect' for k in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
