"""The demo command: the math core on the bundled hand-labelled case, end to end through the real CLI."""

import subprocess
import sys

import pytest

from cli.demo import run_demo


def test_demo_values():
    res = run_demo()
    # weights 5,4,2,1 (sum 12); verdict rows 1111, 0111, 0001
    assert list(res.scores) == pytest.approx([1.0, 7 / 12, 1 / 12])
    assert res.top1 and res.gap > 0 and res.r_disc > 0 and res.r_anchor < 0


def test_dr_demo_prints_table():
    out = subprocess.run([sys.executable, "-m", "cli.main", "demo"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "R_disc (Eq. 13)" in out.stdout and "0.583" in out.stdout


def test_dr_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "cli.main", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "demo" in out.stdout
