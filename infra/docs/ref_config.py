"""reference/configuration.md: every configuration field, from the pydantic models of dr_core/config/.

The models are found, not listed: every ``BaseModel`` defined in a module of ``dr_core.config`` and every model a
field of one of them holds (an ``EngineConfig`` inside ``EnginesConfig``, ...). Each field shows its type, default,
constraints (``ge``, ``le``, ``pattern`` ...) and description; a field without a description shows its type only
and is listed at the end of the page. The shipped presets (dr_core/config/presets.yaml) follow as data.

    .venv/bin/python -c "from infra.docs.ref_config import page; print(page())"
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from infra.docs import md

#: The package whose models are documented.
PACKAGE = "dr_core.config"


def models() -> list[type[BaseModel]]:
    """Every model defined in ``dr_core.config``'s modules, plus the models their fields hold, in module order."""
    package = importlib.import_module(PACKAGE)
    found: list[type[BaseModel]] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseModel) and obj.__module__ == module.__name__ and not obj.__name__.startswith("_"):
                _add(obj, found)
    return found


def _add(model: type[BaseModel], found: list[type[BaseModel]]) -> None:
    if model in found:
        return
    found.append(model)
    for field in model.model_fields.values():
        for nested in _nested_models(field.annotation):
            _add(nested, found)


def _nested_models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


def type_name(annotation) -> str:
    """A readable type: ``int``, ``'a' | 'b'``, ``EngineConfig | None``, ``dict[str, RoleResources]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def default(field) -> str:
    """The field's default as Markdown: a value, ``required``, or what a factory builds."""
    if field.default_factory is not None:
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return f"[{factory.__name__}](#{md.slug(factory.__name__)}) defaults"
        try:
            value = factory()
        except TypeError:  # a factory that takes the validated data
            return "computed"
        if isinstance(value, BaseModel):
            return f"[{type(value).__name__}](#{md.slug(type(value).__name__)}) defaults"
        return md.code(repr(value))
    if field.default is PydanticUndefined:
        return "required"
    value = field.default
    if hasattr(value, "get_secret_value"):
        return md.code("**********")
    return md.code("None" if value is None else repr(value) if isinstance(value, str) else value)


_CONSTRAINTS = ("gt", "ge", "lt", "le", "min_length", "max_length", "pattern", "multiple_of")


def constraints(field) -> str:
    """The field's validation bounds (``>= 1``, ``pattern ...``), one cell."""
    signs = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    out = []
    for meta in field.metadata:
        for name in _CONSTRAINTS:
            value = getattr(meta, name, None)
            if value is not None:
                out.append(f"{signs.get(name, name)} {value}")
    return md.code(", ".join(out)) if out else "–"


def _link_types(annotation, text: str) -> str:
    """The type cell, with each nested model linked to its section."""
    cell = md.code(text)
    links = [f"[{m.__name__}](#{md.slug(m.__name__)})" for m in _nested_models(annotation)]
    return cell + (" → " + ", ".join(links) if links else "")


def undocumented(found: list[type[BaseModel]]) -> list[str]:
    """``Model.field`` of every field without a description."""
    return [f"{m.__name__}.{n}" for m in found for n, f in m.model_fields.items() if not (f.description or "").strip()]


def section(model: type[BaseModel]) -> str:
    """One model: heading (id = its name), its docstring, where it is defined, one row per field."""
    rows = []
    for name, field in model.model_fields.items():
        described = (field.description or "").strip()
        rows.append(
            [
                md.code(name),
                _link_types(field.annotation, type_name(field.annotation)),
                default(field),
                constraints(field),
                md.cell(described) if described else f"(no description; type {md.code(type_name(field.annotation))})",
            ]
        )
    doc = inspect.getdoc(model) or ""
    return "\n\n".join(
        [
            f"## {model.__name__} {{#{md.slug(model.__name__)}}}",
            f"Defined in `{model.__module__}`.",
            md.paragraphs(doc),
            md.table(["field", "type", "default", "constraints", "description"], rows),
        ]
    )


def presets_section() -> str:
    """The shipped presets as data: each preset's fields (dotted paths) and values, as presets.yaml gives them."""
    import yaml

    from dr_core.config.presets import PRESET_NAMES, PRESETS_FILE

    data = yaml.safe_load(PRESETS_FILE.read_text(encoding="utf-8"))
    parts = [
        "## Shipped presets {#presets}",
        "The values `dr_core/config/presets.yaml` sets (`--preset NAME`); every other field keeps its default "
        "above. `round` fields build a [RoundConfig](#roundconfig), `coevolve` fields a "
        "[CoevolveConfig](#coevolveconfig) whose `round` is the preset's round. An engine's "
        "`kv_cache_gib_float32` becomes `kv_cache_gib` for the dtype `auto` resolves to on the machine (halved "
        "for a 2-byte dtype).",
    ]
    for name in PRESET_NAMES:
        rows = [[md.code(key), md.code(value)] for key, value in _flatten(data.get(name) or {})]
        parts += [f"### `{name}` {{#preset-{md.slug(name)}}}", md.table(["field", "value"], rows)]
    return "\n\n".join(parts)


def _flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(value, dict) and value:
        return [row for k, v in value.items() for row in _flatten(v, f"{prefix}{k}." if prefix or k else "")]
    return [(prefix.rstrip("."), value)]


def page() -> str:
    found = models()
    missing = undocumented(found)
    index = md.table(
        ["model", "what it configures"],
        [[f"[{m.__name__}](#{md.slug(m.__name__)})", md.cell(_first_line(m))] for m in found],
    )
    parts = [
        "# Configuration",
        f"Generated at build time from the pydantic models of `{PACKAGE}` by `infra/docs/ref_config.py`: "
        "every field, its type, default, validation bounds and description, as the code declares them. Configs "
        "are frozen and reject unknown fields; `--set a.b=value` on `dr round` / `dr coevolve` and an engines "
        "file (`--engines`) set them.",
        index,
        *(section(m) for m in found),
        presets_section(),
        "## Fields without a description {#undocumented}",
        ("Every field above has a description." if not missing else ", ".join(md.code(f) for f in missing)),
    ]
    return "\n\n".join(parts) + "\n"


def _first_line(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ")
