"""`dr ingest`, `dr sql`, `dr query` end to end through the real CLI, against a local directory and a real S3
server: ranked anchors go in and come back; malformed input and write statements change nothing."""

import errno
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from cli.app import _Commands, app
from dr_core.paths import bundled
from dr_core.store.artifacts import Store

runner = CliRunner()
ANCHORS = bundled("anchors_alpacaeval.jsonl")


def dr(*args):
    return runner.invoke(app, [str(a) for a in args])


def _text(res) -> str:
    """The output with rich's line wrapping undone (error messages wrap at the terminal width)."""
    return res.output.replace("\n", "")


def _files(url):
    store = Store.from_url(url)
    return {t: store.parts(t) for t in ("anchors", "prompts")}


def test_query_errors(tmp_path):
    store = str(tmp_path / "st")
    assert dr("ingest", "anchors", ANCHORS, "--store", store).exit_code == 0
    for args, message in [
        (("query", "nope", "--store", store), "no query named"),
        (("query", "anchor_filter", "--store", store, "-p", "head"), "NAME=VALUE"),
        (("query", "rubric_history", "--store", store), "required"),
        (("sql", "SELEC 1", "--store", store), "cannot parse"),
        (("sql", "SELECT * FROM nowhere", "--store", store), "query failed"),
        (("sql", "SELECT 1", "--store", store, "--format", "xml"), "unknown format"),
        (("ingest", "rubrics", ANCHORS, "--store", store), "cannot ingest"),
        (("ingest", "anchors", ANCHORS, "--store", "ftp://x/y"), "unsupported store URL"),
    ]:
        res = dr(*args)
        assert res.exit_code == 2 and message in _text(res), (args, res.output)


def test_real_entry_point_and_dr_store_env(tmp_path):
    env = {"DR_STORE": str(tmp_path / "st"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    dr_bin = [sys.executable, "-m", "cli.main"]
    out = subprocess.run(
        [*dr_bin, "ingest", "anchors", str(ANCHORS)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [*dr_bin, "query", "gap_by_round", "--format", "json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and json.loads(out.stdout) == []


def test_a_broken_pipe_is_left_to_click_not_made_an_error_line(monkeypatch):
    """`dr ... | head`: the reader leaves while ``dr`` is still writing. click's main exits 1 without a word on
    EPIPE; the project's one-line error path (cli/app.py) must pass the BrokenPipeError on to it instead of
    printing ``error: [Errno 32] Broken pipe`` and exiting 2 (what a real ``dr eval-policy --help | head -30`` did)."""
    demo = typer.Typer(cls=_Commands)

    @demo.command()
    def write() -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    @demo.command()
    def other() -> None:
        """A second command, so that ``write`` is a subcommand as in ``dr``."""

    monkeypatch.setattr(sys, "stdout", sys.stdout)  # click swaps in wrappers that pacify flush; restored after
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    with pytest.raises(SystemExit) as exited:
        typer.main.get_command(demo).main(["write"])
    assert exited.value.code == 1  # click's own EPIPE exit; the one-line error path exits 2
