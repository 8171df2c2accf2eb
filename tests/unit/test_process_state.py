"""Per-process state lives only in its named places (docs/concepts/architecture.md, "State per process").

A function that rebinds a module-level name (``global``), changes a module-level container in place (a mutating
method, an item assignment or deletion), or a cached function without parameters (a process-wide singleton) is
state shared by everything in the process and invisible at the call site. Each such place in dr_core, tasks,
flows and cli is listed here with why it is per process by nature; a new one fails this test until it is argued
for (or, better, passed as a parameter).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dr_core", "tasks", "flows", "cli")
MUTATING = {"add", "append", "extend", "insert", "update", "pop", "popitem", "clear", "setdefault", "remove", "discard"}

#: (module path, kind, name) -> why it is per process
NAMED = {
    ("tasks/runtime.py", "cached factory", "engines"): "the engine pool: a round's tasks share the models loaded",
    ("dr_core/progress.py", "rebound", "_SINK"): "the progress sink the CLI installs for the process",
    ("dr_core/progress.py", "changed in place", "_NEXT"): "the next progress key of that sink",
    ("dr_core/store/atomic.py", "changed in place", "_FRESH"): "temp files this process made and has not locked",
    ("dr_core/faults.py", "changed in place", "_hits"): "the fault points' hit counters (DR_FAULT's #N)",
    ("dr_core/engines/vllm_engine.py", "changed in place", "_OPEN"): "open vLLM engines: vLLM's process groups",
    # memos of what cannot change while the process runs
    ("dr_core/config/presets.py", "cached factory", "_data"): "the packaged presets.yaml, parsed once",
    ("dr_core/config/numerics.py", "cached factory", "_cuda_machine"): "whether this machine has CUDA",
    ("dr_core/config/numerics.py", "cached factory", "bf16_reason"): "this CPU's bf16 support",
}


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _subscripted(target: ast.AST, names: set[str]) -> str | None:
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in names:
        return target.value.id
    return None


def state_places(path: Path) -> set[tuple[str, str]]:
    """(kind, name) of each place in ``path`` where a function keeps state in the module or the process."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, found = _module_names(tree), set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        if not (a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg):
            if any("cache" in ast.unparse(d) for d in fn.decorator_list):
                found.add(("cached factory", fn.name))
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                found.update(("rebound", n) for n in node.names)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in names and node.func.attr in MUTATING:
                    found.add(("changed in place", owner.id))
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                found.update(("changed in place", n) for t in targets if (n := _subscripted(t, names)))
    return found


def test_per_process_state_lives_only_in_its_named_places():
    found = {
        (str(p.relative_to(ROOT)), kind, name)
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        for kind, name in state_places(p)
    }
    unnamed = sorted(found - set(NAMED))
    assert not unnamed, f"module-level state: pass it as a parameter, or name it in NAMED with why: {unnamed}"
    gone = sorted(set(NAMED) - found)
    assert not gone, f"named but no longer there (take it out of NAMED and the architecture page): {gone}"


def test_the_state_rule_can_fail(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import functools\n"
        "SEEN = set()\nCOUNTS = {}\nLAST = None\nLIMIT = 3\n"
        "def f(x):\n    global LAST\n    LAST = x\n    SEEN.add(x)\n    COUNTS[x] = 1\n"
        "    local = {}\n    local[x] = 1\n"
        "    return LIMIT\n"
        "@functools.cache\ndef pool():\n    return []\n"
        "@functools.lru_cache\ndef memo(x):\n    return x\n"
    )
    assert state_places(planted) == {
        ("rebound", "LAST"),
        ("changed in place", "SEEN"),
        ("changed in place", "COUNTS"),
        ("cached factory", "pool"),
    }
