"""Progress and the quiet log, without a model: the sink protocol (dr_core/progress.py), the engine's tqdm stand-in
driven the way vLLM 0.32's ``LLM._run_engine`` drives it, the peak resident memory of a step (dr_core/resources.py,
flows/steps.py::run_step), the CLI's sink (cli/progress.py), the warning filters (cli/quiet.py) and the steps table's
``peak_rss_mb`` column with step rows written before it existed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dr_core import progress

ROOT = Path(__file__).resolve().parents[2]


class FakeSink:
    def __init__(self, with_step: bool = True):
        self.events = []
        if with_step:
            self.step = lambda *a: self.events.append(("step", *a))

    def start(self, key, label, total, unit):
        self.events.append(("start", key, label, total, unit))

    def advance(self, key, n):
        self.events.append(("advance", key, n))

    def stop(self, key):
        self.events.append(("stop", key))


@pytest.fixture
def sink():
    s = FakeSink()
    previous = progress.set_sink(s)
    yield s
    progress.set_sink(previous)


# -- the sink protocol --------------------------------------------------------------------------------------------
def test_work_reports_start_advance_stop_to_the_sink(sink):
    with progress.work("sample", 3, "responses") as w:
        w.advance()
        w.advance(2)
    key = w.key
    assert sink.events == [
        ("start", key, "sample", 3, "responses"),
        ("advance", key, 1),
        ("advance", key, 2),
        ("stop", key),
    ]
    assert w.done == 3
    w.close()  # closing twice tells the sink once
    assert sink.events[-1] == ("stop", key) and len(sink.events) == 4


def test_without_a_sink_work_counts_and_shows_nothing():
    assert progress.sink() is None
    with progress.work("x", None) as w:
        w.advance(5)
    assert w.done == 5
    assert progress.vllm_tqdm(4) is False  # vLLM's use_tqdm=False: no bar at all
    progress.step_finished("sample", "Completed", 1.0, 10.0)  # no sink: nothing happens


def test_step_finished_goes_to_the_sinks_optional_step_method(sink):
    progress.step_finished("r1/verify", "Completed", 83.2, 5222.0)
    assert sink.events == [("step", "r1/verify", "Completed", 83.2, 5222.0)]
    bare = FakeSink(with_step=False)
    previous = progress.set_sink(bare)
    try:
        progress.step_finished("r1/verify", "Cached", 0.1)  # a sink without step(): ignored
    finally:
        progress.set_sink(previous)
    assert bare.events == []


def test_activity_names_the_work_and_nests():
    assert progress.current_activity() == ("generate", "requests")
    with progress.activity("verify", "verdicts"):
        with progress.activity("rubrics", "rubrics"):
            assert progress.current_activity() == ("rubrics", "rubrics")
        assert progress.current_activity() == ("verify", "verdicts")
    assert progress.current_activity(("x", "y")) == ("x", "y")


def _run_engine_like_vllm(use_tqdm, outputs_n: list[int]) -> None:
    """What vllm/entrypoints/common/offline.py ``_run_engine`` does with ``use_tqdm`` (vLLM 0.32)."""
    num_requests = len(outputs_n)
    pbar = use_tqdm(
        total=num_requests,
        desc="Processed prompts",
        dynamic_ncols=True,
        postfix=f"est. speed input: {0:.2f} toks/s, output: {0:.2f} toks/s",
    )
    total_in = total_out = 0
    for n in outputs_n:  # one finished request with n samples
        total_in += 10 * n
        in_spd = total_in / pbar.format_dict["elapsed"]
        total_out += 5 * n
        out_spd = total_out / pbar.format_dict["elapsed"]
        pbar.postfix = f"est. speed input: {in_spd:.2f} toks/s, output: {out_spd:.2f} toks/s"
        pbar.update(n)
        if pbar.n == num_requests:
            pbar.refresh()
    pbar.close()


def test_engine_progress_counts_samples_under_the_activity(sink):
    with progress.activity("verify", "verdicts"):
        factory = progress.vllm_tqdm(3)
        assert callable(factory)
        _run_engine_like_vllm(factory, [3, 3, 3, 3])
    (start, *advances, stop) = sink.events
    assert start[2:] == ("verify", 12, "verdicts")  # 4 requests x 3 samples
    assert [a[2] for a in advances] == [3, 3, 3, 3] and stop == ("stop", start[1])


def test_engine_progress_with_an_iterable_only_iterates(sink):
    """vLLM's ``maybe_tqdm(it, use_tqdm=factory, desc="Rendering prompts")`` calls the factory with the iterable."""
    bar = progress.vllm_tqdm(2)(iter(["a", "b"]), desc="Rendering prompts")
    assert list(bar) == ["a", "b"]
    bar.close()
    assert sink.events == []


# -- peak resident memory -----------------------------------------------------------------------------------------
def _touch(n_bytes: int) -> bytearray:
    buf = bytearray(n_bytes)
    for i in range(0, n_bytes, 4096):  # resident for sure, page by page
        buf[i] = 1
    return buf


def test_peak_rss_sees_a_200_mb_allocation():
    from dr_core.resources import PeakRSS, rss_mb

    assert rss_mb() > 1
    with PeakRSS(interval=0.05) as p:
        buf = _touch(200 << 20)
        time.sleep(0.3)  # several samples while it is held
        del buf
    assert p.start_mb is not None
    assert 150 <= p.peak_mb - p.start_mb <= 800, (p.start_mb, p.peak_mb)
    assert p.stop() == p.peak_mb  # stopped: the figure stays


def test_peak_rss_falls_back_to_getrusage_without_proc(monkeypatch):
    from dr_core import resources

    monkeypatch.setattr(resources, "_STATUS", "/nonexistent/status")
    assert resources.rss_mb() > 1  # ru_maxrss: the peak so far


def test_run_step_records_peak_memory_and_tells_the_sink(sink, tmp_path):
    from dr_core.runs.refs import StepContext
    from flows.steps import StepLog, run_step

    class State:
        name = "Completed"

        def result(self):
            return "done"

    def task(x, *, return_state):
        assert return_state and x == 1
        return State()

    log = StepLog(StepContext(store=str(tmp_path / "store"), run_id="r", round_no=1))
    assert run_step(task, log, "r1/sample", 1) == "done"
    entry = log.entries()["r1/sample"]
    assert set(entry) == {"state", "seconds", "started_at", "peak_rss_mb"} and entry["peak_rss_mb"] > 1
    assert sink.events == [("step", "r1/sample", "Completed", entry["seconds"], entry["peak_rss_mb"])]


# -- the CLI's sink -----------------------------------------------------------------------------------------------
def _console(terminal: bool):
    from rich.console import Console

    return Console(file=io.StringIO(), force_terminal=terminal, width=120, color_system=None)


def test_step_line_and_plain_lines_in_a_log():
    from cli.progress import ProgressSink, duration, memory, plain_line

    now = [0.0]
    console = _console(terminal=False)
    s = ProgressSink(console, plain_every=30, clock=lambda: now[0])
    assert not s.live
    s.start(1, "verify", 400, "verdicts")
    for t in range(1, 100):  # 4 verdicts a second for 99 s: one plain line at 30 s, 60 s and 90 s
        now[0] = float(t)
        s.advance(1, 4)
    now[0] = 200.0
    s.advance(1, 4)  # the last one: no line (the step's line follows)
    s.stop(1)
    s.step("r1/train-generator", "Completed", 83.24, 5222.0)
    lines = console.file.getvalue().splitlines()
    assert lines == [
        "  verify: 120/400 verdicts, 4.0 verdicts/s, ETA 1 min 10 s",
        "  verify: 240/400 verdicts, 4.0 verdicts/s, ETA 40 s",
        "  verify: 360/400 verdicts, 4.0 verdicts/s, ETA 10 s",
        "  r1/train-generator           Completed      83.2 s   peak 5.1 GB",
    ]
    assert memory(830.0) == "peak 830 MB" and memory(None) == "" and duration(3725) == "1 h 02 min"
    assert plain_line("sample", 3, None, "responses", 1.5) == "  sample: 3/? responses, 2.0 responses/s"
    assert plain_line("GRPO", 1, 4, "steps", 40.0) == "  GRPO: 1/4 steps, 1.5 steps/min, ETA 2 min 00 s"


def test_live_bars_are_transient_and_the_sink_is_removed_also_on_error():
    from cli.progress import showing_progress

    console = _console(terminal=True)
    with pytest.raises(RuntimeError):
        with showing_progress(console) as s:
            assert progress.sink() is s and s.live
            with progress.activity("sample", "responses"):
                _run_engine_like_vllm(progress.vllm_tqdm(2), [2, 2, 2])
            assert s._progress is None  # no work counted now: the bars are off the screen
            progress.step_finished("r1/sample", "Completed", 2.0, 900.0)
            with progress.work("verify", 10, "verdicts") as w:
                w.advance(3)
                raise RuntimeError("boom")
    assert progress.sink() is None and s._progress is None
    out = console.file.getvalue()
    assert "r1/sample" in out and "peak 900 MB" in out and "sample" in out


# -- the quiet log's filters --------------------------------------------------------------------------------------
TRL_WARNING = (
    "TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version 0.32.0 installed. "
    "We recommend installing a supported version to avoid compatibility issues."
)
REDUCE_OP = "`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead"

_WARN = f"""
import os, sys, warnings
from cli import quiet
quiet.apply(verbose=sys.argv[1] == "verbose")
warnings.warn({TRL_WARNING!r}, stacklevel=1)
warnings.warn_explicit({REDUCE_OP!r}, FutureWarning, "dispatcher.py", 138, module="vllm.triton_utils.dispatcher")
warnings.warn("an unrelated warning", UserWarning)
warnings.warn_explicit({REDUCE_OP!r}, FutureWarning, "mine.py", 1, module="mine")
print("ENV", os.environ.get("VLLM_LOGGING_LEVEL"), os.environ.get("TORCH_CPP_LOG_LEVEL"),
      os.environ.get("DR_VERBOSE"), os.environ.get("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL"))
import logging
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(message)s")
runs = logging.getLogger("prefect.task_runs")
runs.info("Task run 'sample-1' - Finished in state Completed()")
runs.info("Task run failed with exception: boom - Retry 1/2 will start 0.2 second(s) from now")
runs.warning("a warning that says Finished in state too")
ds = logging.getLogger("DeepSpeed")  # as deepspeed/utils/logging.py makes it, when deepspeed is imported
ds.setLevel(logging.WARNING)
ds.propagate = False
ds.addHandler(logging.StreamHandler(sys.stderr))
ds.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
ds.warning("another DeepSpeed warning")
import subprocess
subprocess.run([sys.executable, "-c", "import warnings; warnings.warn({TRL_WARNING!r}); warnings.warn('child other')"])
"""


def _warn(mode: str, **env) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VLLM_", "TORCH_CPP", "DR_VERBOSE", "PYTHONWARNINGS", "PREFECT_LOGGING"))
    }
    return subprocess.run(
        [sys.executable, "-c", _WARN, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean | env,
        timeout=60,
        check=True,
    )


def test_quiet_filters_exactly_the_known_warnings_also_in_child_processes():
    out = _warn("quiet", VLLM_LOGGING_LEVEL="INFO")  # a value the user set wins
    assert "TRL currently supports vLLM versions" not in out.stderr
    assert out.stderr.count("reduce_op") == 1 and "mine.py" in out.stderr  # only vLLM's dispatcher's is filtered
    assert "an unrelated warning" in out.stderr and "child other" in out.stderr
    assert "ENV INFO ERROR None None" in out.stdout
    assert "Finished in state Completed" not in out.stderr  # the CLI prints its own step line instead
    assert "Retry 1/2 will start" in out.stderr and "a warning that says" in out.stderr  # retries, warnings stay
    assert "Setting accelerator to CPU" not in out.stderr and "another DeepSpeed warning" in out.stderr


def test_verbose_filters_nothing():
    out = _warn("verbose")
    assert out.stderr.count("TRL currently supports vLLM versions") == 2  # this process and the child
    assert out.stderr.count("reduce_op") == 2 and "an unrelated warning" in out.stderr
    assert "ENV None None 1 None" in out.stdout
    assert "Finished in state Completed" in out.stderr and "Retry 1/2 will start" in out.stderr
    assert "Setting accelerator to CPU" in out.stderr


# -- the steps table's peak_rss_mb: rows written before it existed stay readable ----------------------------------
def _old_steps_file(store_dir: Path, run_id: str, execution: str) -> None:
    """A steps part as written before the peak_rss_mb column existed."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    d = store_dir / "steps" / f"run_id={run_id}" / "round=1"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "run_id": [run_id],
                "round": pa.array([1], pa.int32()),
                "execution": [execution],
                "flow": ["dynamicrubric-round"],
                "step": ["sample"],
                "state": ["Completed"],
                "started_at": pa.array([dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
                "seconds": [12.5],
            }
        ),
        d / f"exec-{execution}.parquet",
    )


def _new_steps(store, run_id: str, execution: str, peak: float) -> None:
    import datetime as dt

    store.write(
        "steps",
        [
            {
                "execution": execution,
                "flow": "dynamicrubric-round",
                "step": "sample",
                "state": "Cached",
                "started_at": dt.datetime(2025, 1, 2, tzinfo=dt.timezone.utc),
                "seconds": 0.5,
                "peak_rss_mb": peak,
            }
        ],
        part=f"exec-{execution}",
        run_id=run_id,
        round=1,
    )


def test_step_times_reads_steps_written_before_peak_rss_mb(tmp_path):
    from dr_core.store import sql
    from dr_core.store.artifacts import Store

    _old_steps_file(tmp_path, "old", "e0")
    store = Store.from_url(str(tmp_path))
    (row,) = sql.run(store.connect(), "step_times", {"run_id": "old"}).to_pylist()
    assert row["seconds"] == 12.5 and row["peak_rss_mb"] is None and row["execution_peak_rss_mb"] is None
    assert store.read_table("steps").num_rows == 1


def test_step_times_has_the_peak_of_new_rows(tmp_path):
    from dr_core.store import sql
    from dr_core.store.artifacts import Store

    store = Store.from_url(str(tmp_path))
    _new_steps(store, "new", "e1", 812.5)
    (row,) = sql.run(store.connect(), "step_times", {"run_id": "new"}).to_pylist()
    assert row["peak_rss_mb"] == 812.5 and row["execution_peak_rss_mb"] == 812.5


def test_step_times_reads_a_store_with_old_and_new_step_rows(tmp_path):
    from dr_core.store import sql
    from dr_core.store.artifacts import Store

    store = Store.from_url(str(tmp_path))
    _new_steps(store, "mixed", "a-new", 700.0)  # sorts first: the view takes its schema
    _old_steps_file(tmp_path, "mixed", "b-old")
    rows = sql.run(store.connect(), "step_times", {"run_id": "mixed"}).to_pylist()
    assert sorted((r["execution"], r["peak_rss_mb"]) for r in rows) == [("a-new", 700.0), ("b-old", None)]
