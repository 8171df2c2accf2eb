"""The Layout section of docs/concepts/architecture.md matches the tree: every path it lists exists, and every
module of the project's packages is listed in it (a new module needs its line; a moved one, its new place). The
README's shorter map lists every tracked top folder and every subpackage of dr_core, and only paths that exist. And
the test folders' rule: the ``integration`` marker follows the folder (tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The page whose "## Layout" section lists the tree.
ARCHITECTURE = ROOT / "docs" / "concepts" / "architecture.md"
#: The front page, whose "## Layout" section is the short map: top folders and dr_core's subpackages.
README = ROOT / "README.md"
#: The packages whose every module the Layout lists.
LISTED = ("cli", "flows", "tasks", "dr_core")


def layout_entries(page: str) -> set[str]:
    """The paths of the Layout section's tree: an entry is the names before the first run of two spaces on a line
    (several joined by ", "), nested under the entry above it with less indentation."""
    section = page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    paths, stack = set(), []  # stack: (indent, directory)
    for line in block.splitlines():
        if not line.strip() or line.startswith(" " * 20):  # a continuation of the description above
            continue
        indent = len(line) - len(line.lstrip())
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        for name in (n.strip() for n in names.split(",")):
            path = f"{parent}{name}"
            paths.add(path.rstrip("/"))
            if name.endswith("/"):
                stack.append((indent, path))
    return paths


def test_every_listed_path_exists_and_every_module_is_listed():
    listed = layout_entries(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = sorted(p for p in listed if not (ROOT / p).exists())
    assert not missing, f"the Layout of docs/concepts/architecture.md lists paths that are not in the tree: {missing}"
    modules = {
        str(p.relative_to(ROOT))
        for pkg in LISTED
        for p in (ROOT / pkg).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    unlisted = sorted(modules - listed)
    assert not unlisted, f"modules the Layout of docs/concepts/architecture.md does not list: {unlisted}"


def test_the_readme_map_lists_every_top_folder_and_subpackage_and_only_what_exists():
    import subprocess

    listed = layout_entries(README.read_text(encoding="utf-8"))
    missing = sorted(p for p in listed if not (ROOT / p).exists())
    assert not missing, f"the README's Layout lists paths that are not in the tree: {missing}"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/", 1)[0] for line in tracked.splitlines() if "/" in line}
    folders = {f for f in folders if not f.startswith(".")}  # .ci/ is CI's, not a reader's
    subpackages = {
        str(p.parent.relative_to(ROOT))
        for p in (ROOT / "dr_core").glob("*/*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    unlisted = sorted((folders | subpackages) - listed)
    assert not unlisted, f"folders the README's Layout does not list: {unlisted}"


def test_the_parser_nests_entries_by_indentation():
    page = (
        "x\n## Layout\n\n```\ntop/                 a package\n  a.py, b.py         two modules\n"
        "                     continued description\n  sub/               nested\n    c.py             deep\n"
        "other.py             beside top\n```\n\n## Next\n"
    )
    assert layout_entries(page) == {"top", "top/a.py", "top/b.py", "top/sub", "top/sub/c.py", "other.py"}


def test_a_test_in_the_wrong_folder_is_named():
    from tests.conftest import INTEGRATION_DIR, UNIT_DIR, tier_problem

    assert tier_problem(UNIT_DIR / "test_x.py", False) is None
    assert tier_problem(INTEGRATION_DIR / "test_x.py", True) is None
    assert tier_problem(INTEGRATION_DIR / "test_x.py", False) is None  # marked by the folder
    assert tier_problem(UNIT_DIR / "test_x.py", True) == "marked integration, but under tests/unit/"
    assert tier_problem(UNIT_DIR.parent / "test_x.py", False) == "neither under tests/unit/ nor tests/integration/"
