"""How every pipeline task caches, persists and retries: one place, declared on the tasks in tasks/round.py.

Caching by content. A task's cache key is a SHA-256 over its name, the version of the code it runs
(``code_version(module)``: its module, the project modules it imports transitively, by statement or by a dotted
path in a string, and the queries they name; docstrings, comments and SQL header prose left out), and its inputs. An
artifact input (a reference
``{"uri", "sha256"}``) counts by its content hash, never by its URI: URIs carry run ids, and the same work under
another run id must hit the cache. Model checkpoints (a reference ``{"uri", "fingerprint"}``) count by their
identity (``tasks.runtime.model_id``), configs by their JSON without their secrets (``dr_core.config.AUTH_FIELDS``:
an API key or password is never hashed, and rotating one keeps the cache), and without where the work runs
(``PLACEMENT_FIELDS``: shards and Ray resources).

Persistence. Results (small dicts of URIs and numbers) and cache records are stored under the artifact store
(``<store>/_prefect/results``), so a new process, or a new machine pointed at the same S3 prefix, hits the cache.

Retries. Model and storage steps retry on transient failures (engine crash, out-of-memory, S3/network errors) with
backoff; never on bad input (``BAD_INPUT``: the data/config errors of dr_core), which fails at once.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from dr_core.config import AUTH_FIELDS
from dr_core.datasets import DataError
from dr_core.paths import REPO_DIR
from dr_core.runs.refs import StepContext

#: Exceptions that mean "the input is wrong": retrying cannot help.
BAD_INPUT = (DataError, ValueError, TypeError, KeyError, FileNotFoundError)


#: Config fields that say where work runs, not what it computes (``RoundConfig.scale``: shards and Ray resources):
#: left out of cache keys, so a run moved to a Ray cluster, or split into more shards, hits the cache of the same
#: work done elsewhere (the shards' merged rows are the unsharded rows, byte for byte:
# tests/integration/test_shards.py).
PLACEMENT_FIELDS = frozenset({"scale"})
#: Config fields read only after the work, to judge it (``CoevolveConfig.monitors``: the reward-hacking monitors'
#: thresholds): left out of cache keys too, so changing a threshold re-judges a run without redoing it.
JUDGING_FIELDS = frozenset({"monitors"})

#: The project's own top-level packages: the code a step can run.
PROJECT_PACKAGES = ("dr_core", "tasks")


def _module_file(module: str, root: Path) -> Path | None:
    """The source file of a project module (``pkg/mod.py`` or ``pkg/mod/__init__.py``), None if it is not one."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


#: A project module named in a string: what ``make_engine`` imports by path.
_MODULE_PATH = re.compile(r"(?:dr_core|tasks)(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module a source tree imports or names by its dotted path in a string. Imports at module level and
    inside functions count (lazy imports run too), as does a plug-in's path that importlib imports."""
    found: set[str] = set()
    package = module if is_package or "." not in module else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # ``from pkg import module``
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.fullmatch(node.value):
            found.add(node.value.split(":")[0])  # a plug-in named by path ("dr_core.engines.vllm_engine:VLLMEngine")
    return found


def _code_text(tree: ast.AST) -> str:
    """What a module does, without what it says: the AST with docstrings dropped (comments and layout are not in
    it), so a docstring, comment or formatting edit keeps the cache."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def _sql_text(path: Path) -> str:
    """A query as DuckDB runs it: the statement and its ``-- param`` declarations (defaults matter), without the
    header's prose, so a header edit keeps the cache."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(
        line for line in lines if not line.lstrip().startswith("--") or line.lstrip()[2:].strip().startswith("param ")
    ).strip()


@lru_cache(maxsize=None)
def _parsed(
    source: str, module: str, is_package: bool, sql_names: frozenset[str], data_names: frozenset[str]
) -> tuple[str, frozenset[str], frozenset[str], frozenset[str]]:
    """One source file: its normalised code, the modules it imports, the query names and the bundled data files
    (``dr_core/data``) it mentions (cached by the source text, so an edited file is parsed again)."""
    tree = ast.parse(source)
    imports = frozenset(_imported(tree, module, is_package))
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    queries = frozenset(v for v in strings if v in sql_names)
    data = frozenset(d for d in data_names if any(d in v for v in strings))  # "bundled:x.jsonl", bundled("x.jsonl")
    return _code_text(tree), imports, queries, data


def step_code(module: str, root: Path | None = None) -> dict[str, str]:
    """The code a step runs: the step's module, every project module it imports (transitively, lazy imports
    included, with their packages' ``__init__``), the ``sql/*.sql`` files named in that code, and the bundled data
    files (``dr_core/data``, by content) named there.
    Returns {relative path: normalised text}. ``root``: the repository (default ``REPO_DIR``)."""
    root = root or REPO_DIR
    sql_files = {p.stem: p for p in (root / "sql").glob("*.sql")}
    data_files = {p.name: p for p in (root / "dr_core" / "data").iterdir() if p.is_file() and p.suffix != ".py"}
    names, data_names = frozenset(sql_files), frozenset(data_files)
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):  # a module's packages run their __init__ first
            name = ".".join(parts[:i])
            path = _module_file(name, root)
            if path is None or str(path.relative_to(root)) in seen:
                continue
            text, imports, queries, data = _parsed(
                path.read_text(encoding="utf-8"), name, path.name == "__init__.py", names, data_names
            )
            seen[str(path.relative_to(root))] = text
            todo.extend(imports)
            seen.update({str(sql_files[q].relative_to(root)): _sql_text(sql_files[q]) for q in queries})
            seen.update(
                {
                    str(data_files[d].relative_to(root)): hashlib.sha256(data_files[d].read_bytes()).hexdigest()
                    for d in data
                }
            )
    return seen


@lru_cache(maxsize=None)
def code_version(module: str | None = None, root: Path | None = None) -> str:
    """SHA-256 (first 16 hex) of the code a step runs (``step_code`` of its module): an edit to the report or to
    an SQL file's header keeps a training step's cache; an edit to what the step runs misses it. With no module:
    the whole pipeline (every module of dr_core and tasks, every query), the version recorded in ``runs``."""
    root = root or REPO_DIR
    if module is None:
        files = {
            str(p.relative_to(root)): _code_text(ast.parse(p.read_text(encoding="utf-8")))
            for pkg in PROJECT_PACKAGES
            for p in (root / pkg).rglob("*.py")
        }
        files.update({str(p.relative_to(root)): _sql_text(p) for p in (root / "sql").glob("*.sql")})
    else:
        files = step_code(module, root)
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    return h.hexdigest()[:16]


def _canonical(value: Any) -> Any:
    """Inputs reduced to what determines the output: artifacts by content hash, models by fingerprint; secrets
    (an engine's api_key, basic_auth, api_key_env) left out: they do not change what a model answers."""
    if isinstance(value, StepContext):  # where the step writes, not what it computes: only its stage counts
        return value.cache_identity()
    if isinstance(value, dict):
        for identity in ("sha256", "fingerprint"):  # an artifact / checkpoint reference: content, not location
            if identity in value and "uri" in value:
                return {identity: value[identity]}
        return {
            k: _canonical(v)
            for k, v in sorted(value.items())
            if k not in {"run_id", "store", *AUTH_FIELDS, *PLACEMENT_FIELDS, *JUDGING_FIELDS}
        }
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if hasattr(value, "model_dump"):
        return _canonical(value.model_dump(mode="json"))
    if isinstance(value, Path):
        return str(value)
    return value


def content_key(task_name: str, parameters: dict[str, Any], module: str) -> str:
    """SHA-256 of a task's name, the version of the code it runs (``code_version(module)``, module: the task's
    own) and its canonical inputs (run id, store and round left out)."""
    payload = {
        "task": task_name,
        "code": code_version(module),
        "inputs": _canonical({k: v for k, v in parameters.items() if k not in {"run_id", "store", "round_no"}}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def content_cache_key(context, parameters: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn``: ``content_key`` of the task run. Run ids and the store URL are left out on purpose
    (see module docstring)."""
    return content_key(context.task.name, parameters, context.task.fn.__module__)


def run_cache_key(context, parameters: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn`` of a step whose outputs belong to its run: ``content_key`` plus the run id (of the
    ``ctx`` parameter). A GRPO update registers its checkpoint and writes its rollout rows in the run's partition,
    and later rounds and the anchor refresh find them there (``checkpoints.latest``), so another run id never takes
    an update over from the cache: it trains its own. A re-run of the same run id (a resume) still hits."""
    ctx = parameters["ctx"]
    return content_key(context.task.name, {**parameters, "owner_run": ctx.run_id}, context.task.fn.__module__)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: anything that is not bad input (engine crash, OOM, network, S3)."""
    if isinstance(exc, (MemoryError, ConnectionError, TimeoutError)):
        return True
    return not isinstance(exc, BAD_INPUT)


def retry_on_transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry unless the exception says the input is bad."""
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we classify, not swallow
        return is_transient(exc)
    return False
