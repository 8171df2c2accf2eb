"""The README and the documentation pages keep their promises: the README stays short, links only to pages that
exist and gives CI's own test command; every function the equations page names is defined where it says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
EQUATIONS = DOCS / "concepts" / "equations.md"
#: The most lines the README may have: the rest belongs in docs/.
README_MAX_LINES = 250

LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A table row of the equations page: | label | what | `function` | `path/to/module.py` |
FUNCTION_ROW = re.compile(r"^\|[^|]+\|[^|]+\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|\s*`([\w/]+\.py)`\s*\|\s*$")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def local_links(text: str) -> list[str]:
    """The relative link targets of a markdown text, without their #anchor (URLs and pure anchors left out)."""
    targets = (t.split("#", 1)[0] for t in LINK.findall(text))
    return [t for t in targets if t and "://" not in t and not t.startswith("mailto:")]


def equation_functions(page: str) -> list[tuple[str, str]]:
    """(function, module path) of every table row that names one."""
    return [m.groups() for m in map(FUNCTION_ROW.match, page.splitlines()) if m]


def defined_names(path: Path) -> set[str]:
    """Every function and class defined in a module, at any depth (read with ast: nothing is imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def test_the_readme_is_short():
    n = len(readme().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines, at most {README_MAX_LINES}: move the detail into docs/"


def test_the_readme_links_to_pages_that_exist():
    links = local_links(readme())
    assert any(t.startswith("docs/") for t in links), "README.md links to no documentation page"
    missing = sorted({t for t in links if not (ROOT / t).is_file()})
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_indexes_every_hand_written_page():
    linked = {t for t in local_links(readme()) if t.startswith("docs/")}
    pages = {
        str(p.relative_to(ROOT))
        for p in DOCS.rglob("*.md")
        if p.parent.name != "reference" and p.name != "results.md"  # generated at build time
    }
    assert not pages - linked, f"pages the README's documentation index leaves out: {sorted(pages - linked)}"


def test_the_readme_test_command_is_the_ci_command():
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if ln.strip()]
    command = ci[-1]
    blocks = re.findall(r"```bash\n(.*?)```", readme(), flags=re.S)
    commands = [ln.strip() for b in blocks for ln in b.splitlines()]
    assert command in commands, f"README.md does not give .ci/run's test command: {command!r}"
    assert "mkdocs build --strict" in command and "pytest" in command


def test_every_function_of_the_equations_page_exists():
    rows = equation_functions(EQUATIONS.read_text(encoding="utf-8"))
    assert {"rubric_scores", "discriminability_reward", "anchor_reward", "combined_advantages"} <= {f for f, _ in rows}
    wrong = [
        f"{module}::{function}"
        for function, module in rows
        if not (ROOT / module).is_file() or function not in defined_names(ROOT / module)
    ]
    assert not wrong, f"docs/concepts/equations.md names functions that are not defined there: {wrong}"


def test_the_scoring_functions_are_importable_where_the_page_says():
    import importlib

    for function, module in equation_functions(EQUATIONS.read_text(encoding="utf-8")):
        if module.startswith("dr_core/scoring/"):  # pure numpy: cheap to import
            mod = importlib.import_module(module.removesuffix(".py").replace("/", "."))
            assert callable(getattr(mod, function)), f"{module}::{function}"


def test_the_parsers_read_what_they_should():
    text = "see [a](docs/a.md#x), [b](https://x.org/y.md), [c](#top) and [d](../e.md)"
    assert local_links(text) == ["docs/a.md", "../e.md"]
    page = "| Eq. 12 | score | `rubric_scores` | `dr_core/scoring/equations.py` |\n| a | b | c | d |\n"
    assert equation_functions(page) == [("rubric_scores", "dr_core/scoring/equations.py")]
