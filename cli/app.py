"""The ``dr`` app: its root option (``--debug``), the one error path around every command, and the command table.

Each command's function lives in its group's module (doctor, demo, store_commands, models, evaluation, serving, runs,
report); the table below registers them, in the order ``dr --help`` lists them. A project error raised anywhere
below a command is one line on stderr and exit 2 (cli/output.py); ``cli/main.py`` is the installed entry point.

    dr --help
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from cli import demo, doctor, evaluation, models, report, runs, serving, store_commands
from cli.output import Invocation, debug_of, error_line, fail, project_errors


class _Commands(TyperGroup):
    """The app's click group: turns project errors from any command into ``error: <one line>`` and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # the reader went away (`dr ... | head`): click's main exits 1 quietly
            raise
        except Exception as exc:
            if debug_of(ctx) or not isinstance(exc, project_errors()):
                raise
            fail(error_line(exc))


app = typer.Typer(
    name="dr",
    cls=_Commands,
    help="dynamicrubric: co-evolve a rubric generator and a policy (DynamicRubric), score, query and report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(
        False,
        "--debug",
        envvar="DR_DEBUG",
        help="Show the traceback of an error instead of one line (for bug reports).",
    ),
) -> None:
    """dynamicrubric: co-evolve a rubric generator and a policy (DynamicRubric), score, query and report."""
    ctx.obj = Invocation(debug=debug)  # this invocation only (typer reads DR_DEBUG into it)


# -- the command table: no model, store, evaluator, service, then the Prefect-run ones -----------------------------
app.command()(doctor.doctor)
app.command()(demo.demo)
app.command()(store_commands.ingest)
app.command("sql")(store_commands.sql_cmd)
app.command()(store_commands.query)
app.add_typer(models.model_app, name="model")
app.command()(evaluation.score)
app.command()(serving.serve)
app.command("eval-evaluator")(evaluation.eval_evaluator)
app.command("eval-policy")(evaluation.eval_policy)
app.command("round")(runs.round_cmd)
app.command("coevolve")(runs.coevolve_cmd)
app.command("report")(report.report_cmd)
app.command("stale-fresh")(runs.stale_fresh_cmd)


def install_signal_handlers() -> None:
    """SIGTERM (a scheduler stopping the job) becomes SystemExit(143) in the main thread, so ``finally`` blocks
    run: an atomic write in progress removes its temp file (dr_core.store.atomic) instead of leaving it behind."""
    import signal
    import sys

    def _terminate(signum, frame):
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
