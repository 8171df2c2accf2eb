"""reference/cli.md: every ``dr`` command and subcommand, walked from the typer app's click command (cli/app.py).

Each command gets its help text, its usage line and a table of its parameters (arguments first, then options):
names, type, default, environment variable and help, as ``dr COMMAND --help`` would print them. Hidden commands
and options stay hidden.

    .venv/bin/python -c "from infra.docs.ref_cli import page; print(page())"
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.docs import md


@dataclass(frozen=True)
class Command:
    """One command of the tree: its path (``("model", "list")``), the click object and its context."""

    path: tuple[str, ...]
    command: object
    ctx: object

    @property
    def name(self) -> str:
        return " ".join(("dr", *self.path))


def commands() -> list[Command]:
    """The root (path ``()``) and every visible command below it, depth first, in ``dr --help``'s order."""
    import typer.main

    from cli.app import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="dr")
    out: list[Command] = []
    _walk(Command((), root, ctx), out)
    return out


def _walk(node: Command, out: list[Command]) -> None:
    out.append(node)
    group = node.command
    if not hasattr(group, "list_commands"):
        return
    for name in group.list_commands(node.ctx):
        sub = group.get_command(node.ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        ctx = sub.context_class(sub, info_name=name, parent=node.ctx)
        _walk(Command((*node.path, name), sub, ctx), out)


def _is_argument(param) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _names(param, record: tuple[str, str] | None) -> str:
    if _is_argument(param):
        return (param.metavar or param.name).upper()
    opts = [*param.opts, *param.secondary_opts]
    if record and " / " in record[0]:  # a --flag / --no-flag pair, as click shows it
        return record[0].split(" <", 1)[0]
    return ", ".join(sorted(opts, key=lambda o: (o.startswith("--"), o)))


def _type(param, ctx) -> str:
    """The value's type as ``--help`` shows it (``<int>``, ``<path>``); ``flag`` for an on/off option."""
    if getattr(param, "is_flag", False):
        return "flag"
    try:
        shown = param.display_type(ctx)  # typer's parameters
    except (AttributeError, TypeError):
        shown = getattr(getattr(param, "type", None), "name", "")  # plain click
    shown = str(shown or "").strip("<>")
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None or high is not None:
        shown = (
            shown.replace(" range", "")
            + " "
            + " and ".join(
                b for b in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "") if b
            )
        )
    if getattr(param, "multiple", False):
        shown = f"{shown.removeprefix('list[').removesuffix(']')}, repeatable"
    return shown or "text"


def _default(param) -> str:
    if param.required:
        return "required"
    value = param.default
    if callable(value):
        return "computed"
    if value is None or value == [] or value == ():
        return "–"
    if isinstance(value, bool):
        if param.secondary_opts:
            return md.code(param.opts[0] if value else param.secondary_opts[0])
        return md.code(str(value).lower())
    return md.code(value)


def param_rows(node: Command) -> list[list[str]]:
    """One row per visible parameter: name(s), type, default, environment variable, help."""
    rows = []
    params = [p for p in node.command.params if not getattr(p, "hidden", False)]
    for p in sorted(params, key=lambda p: not _is_argument(p)):  # arguments first, each group in its order
        record = p.get_help_record(node.ctx) if not _is_argument(p) else None
        envvar = p.envvar if isinstance(p.envvar, str) else ", ".join(p.envvar or ())
        rows.append(
            [
                md.code(_names(p, record)),
                md.cell(_type(p, node.ctx)),
                _default(p),
                md.code(envvar) if envvar else "–",
                md.cell(getattr(p, "help", None) or ""),
            ]
        )
    return rows


def _usage(node: Command) -> str:
    pieces = node.command.collect_usage_pieces(node.ctx)
    return " ".join([node.name, *pieces])


def section(node: Command) -> str:
    """One command's Markdown: heading (with an id ``dr-<path>``), help, usage, parameters, subcommands."""
    level = "#" * min(2 + max(len(node.path) - 1, 0), 4)
    anchor = md.slug(node.name)
    parts = [f"{level} `{node.name}` {{#{anchor}}}", md.paragraphs(node.command.help or "(no help text)")]
    parts.append(f"```text\n{_usage(node)}\n```")
    rows = param_rows(node)
    if rows:
        parts.append(md.table(["name", "type", "default", "env var", "help"], rows))
    else:
        parts.append("No arguments or options.")
    return "\n\n".join(parts)


def page() -> str:
    """The whole page: the root's options, an index of the commands, then one section per command."""
    nodes = commands()
    root, rest = nodes[0], nodes[1:]
    index = md.table(
        ["command", "what it does"],
        [[f"[`{n.name}`](#{md.slug(n.name)})", md.cell(_short(n.command))] for n in rest],
    )
    head = [
        "# Command line",
        "Generated at build time from the `dr` app (`cli/app.py`) by `infra/docs/ref_cli.py`: every command, "
        "argument and option below is what the installed `dr` accepts. `dr COMMAND --help` prints the same.",
        "## `dr` {#dr}",
        md.paragraphs(root.command.help or ""),
        f"```text\n{_usage(root)}\n```",
        md.table(["name", "type", "default", "env var", "help"], param_rows(root)),
        "## Commands",
        index,
    ]
    return "\n\n".join([*head, *(section(n) for n in rest)]) + "\n"


def _short(command) -> str:
    help_text = (command.help or "").strip()
    return (command.short_help or help_text.split("\n\n", 1)[0]).replace("\n", " ")
