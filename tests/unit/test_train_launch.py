"""The launched GRPO update's logic without a model (dr_core/config/training.py LaunchSettings, dr_core/train/multi.py):
config validation, the launch checks, the accelerate command, the ranks' environment, the input files, reading the
ranks' results back, progress lines, and ``run_launch`` on a trivial child process (exit code, timeout).

    .venv/bin/python -m pytest -q tests/unit/test_train_launch.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from dr_core import progress
from dr_core.config import EngineConfig, coevolve_preset, load_engines_config
from dr_core.config.training import GRPOSettings, LaunchSettings
from dr_core.constants import COMPLETE_MARKER
from dr_core.train import multi
from dr_core.train.grpo import GeneratorRow, PolicyRow
from dr_core.train.launch import PROGRESS_ENV, LineSink, load_rows

ROOT = Path(__file__).resolve().parents[2]
HTTP = EngineConfig(kind="openai_http", model="m", base_url="http://127.0.0.1:9/v1", api_key_env="DR_TEST_KEY")
TWO = LaunchSettings(num_processes=2, config_file="infra/accelerate/zero2.yaml")
SETTINGS = GRPOSettings(num_generations=2, per_device_train_batch_size=2, max_steps=2)


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises((ValueError, ValidationError)) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ------------------------------------------------------------------------------------------------ LaunchSettings


def test_the_default_is_one_process_in_process_and_the_presets_keep_it():
    assert LaunchSettings().in_process
    for name in ("tiny", "paper"):
        assert coevolve_preset(name).launch == LaunchSettings()
    assert not TWO.in_process
    assert not LaunchSettings(config_file="infra/accelerate/zero3.yaml").in_process  # one ZeRO-3 rank, launched


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(num_processes=2), "need launch.config_file"),
        (dict(num_machines=2, num_processes=2), "need launch.config_file"),
        (dict(num_processes=3, num_machines=2, config_file="c.yaml"), "not a multiple of launch.num_machines"),
        (dict(machine_rank=1), "below launch.num_machines"),
        (dict(hostfile="h"), "for several machines"),
        (dict(multinode_launcher="pdsh", config_file="c.yaml"), "for several machines"),
        (
            dict(num_processes=2, num_machines=2, config_file="c.yaml", multinode_launcher="standard"),
            "needs launch.main_process_ip",
        ),
        (dict(num_processes=2, num_machines=2, config_file="c.yaml", main_process_port=0), "one machine only"),
        (dict(env={"WORLD_SIZE": "4"}), "set by the launcher"),
        (dict(env={"BAD-NAME": "1"}), "not an environment variable name"),
        (dict(timeout_s=0), "greater than 0"),
    ],
)
def test_launch_settings_refuse_what_cannot_launch(fields, words):
    assert words in _error(LaunchSettings, **fields)


def test_launch_settings_round_trip_through_json_and_stay_hashable():
    s = LaunchSettings(num_processes=4, config_file="infra/accelerate/zero3.yaml", env={"B": "2", "A": "1"})
    assert s.env == (("A", "1"), ("B", "2"))
    assert LaunchSettings.model_validate_json(s.model_dump_json()) == s
    cfg = coevolve_preset("tiny", launch=s.model_dump())
    assert cfg.launch == s and hash(s) == hash(cfg.launch)


# ------------------------------------------------------------------------------------------------ check_launch


def test_an_in_process_update_needs_no_plan():
    assert multi.check_launch(LaunchSettings(), GRPOSettings(rollouts="vllm"), "policy", {}) is None


def test_vllm_rollouts_are_refused_for_a_launched_update():
    msg = _error(
        multi.check_launch,
        TWO,
        GRPOSettings(num_generations=2, per_device_train_batch_size=2, rollouts="vllm"),
        "generator",
        {"verifier": HTTP},
    )
    assert "generator.rollouts = 'vllm'" in msg and "rollouts: trl" in msg


def test_several_ranks_need_whole_groups_in_every_per_device_slice():
    # 2 x 2 = 4 completions per generation keeps whole groups of 4 in one process; over two ranks TRL slices each
    # step's batch in 2s, so a group would be split
    s = GRPOSettings(num_generations=4, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    assert (
        multi.check_launch(LaunchSettings(config_file="infra/accelerate/zero2.yaml"), s, "policy", {"verifier": HTTP})
        is not None
    )
    msg = _error(multi.check_launch, TWO, s, "policy", {"verifier": HTTP})
    assert "policy.per_device_train_batch_size = 2 is not a multiple of policy.num_generations = 4" in msg


@pytest.mark.parametrize("secret", [dict(api_key="sk-inline"), dict(base_url="http://user:pw@127.0.0.1:9/v1")])
def test_inline_secrets_are_refused_with_the_way_out(secret):
    cfg = EngineConfig(**{**HTTP.model_dump(exclude={"api_key_env"}), **secret})
    msg = _error(multi.check_launch, TWO, SETTINGS, "policy", {"verifier": HTTP, "generator": cfg})
    assert "engine generator" in msg and "api_key_env" in msg and "sk-inline" not in msg and "pw" not in msg


def test_a_missing_or_broken_accelerate_config_is_named(tmp_path):
    msg = _error(
        multi.check_launch,
        TWO.model_copy(update={"config_file": "infra/accelerate/nope.yaml"}),
        SETTINGS,
        "policy",
        {"verifier": HTTP},
    )
    assert "launch.config_file 'infra/accelerate/nope.yaml': no such file" in msg
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    assert "not valid YAML" in _error(
        multi.check_launch, TWO.model_copy(update={"config_file": str(bad)}), SETTINGS, "policy", {"verifier": HTTP}
    )


def _multinode(**fields) -> LaunchSettings:
    return LaunchSettings(
        **{"num_processes": 4, "num_machines": 2, "config_file": "infra/accelerate/zero3-multinode.yaml", **fields}
    )


def test_several_machines_need_a_hostfile_that_lists_them(tmp_path):
    msg = _error(multi.check_launch, _multinode(), SETTINGS, "policy", {"verifier": HTTP})
    assert "needs a DeepSpeed hostfile" in msg and "hostfile.example" in msg
    assert "no such file" in _error(
        multi.check_launch, _multinode(hostfile=str(tmp_path / "none")), SETTINGS, "policy", {"verifier": HTTP}
    )
    hosts = tmp_path / "hostfile"
    for text, words in [
        ("a slots=2\n", "1 host(s) listed, launch.num_machines = 2"),
        ("a slots=2\nb slots=1\n", "b list(s) fewer slots than the 2 ranks"),
        ("a slots=2\na slots=2\n", "listed twice"),
        ("a 2\nb slots=2\n", ":1: expected 'hostname slots=N'"),
    ]:
        hosts.write_text(text)
        assert words in _error(
            multi.check_launch, _multinode(hostfile=str(hosts)), SETTINGS, "policy", {"verifier": HTTP}
        ), text
    hosts.write_text("# two machines\nnode-a slots=2\nnode-b slots=4  # the big one\n")
    plan = multi.check_launch(_multinode(hostfile=str(hosts)), SETTINGS, "policy", {"verifier": HTTP})
    assert plan.launcher == "pdsh" and plan.hostfile == hosts and plan.starts_all_machines
    assert multi.read_hostfile(hosts) == {"node-a": 2, "node-b": 4}


def test_the_example_hostfile_and_the_multinode_config_parse():
    hosts = multi.read_hostfile(ROOT / "infra/accelerate/hostfile.example")
    plan = multi.check_launch(
        _multinode(num_processes=16, hostfile="infra/accelerate/hostfile.example"),
        SETTINGS,
        "policy",
        {"verifier": HTTP},
    )
    assert len(hosts) == 2 and plan.distributed_type == "DEEPSPEED" and plan.config_file.is_file()


def test_launchers_that_start_one_machine_need_the_head_address(tmp_path):
    plan = multi.check_launch(
        _multinode(multinode_launcher="standard", main_process_ip="10.0.0.1"), SETTINGS, "policy", {"verifier": HTTP}
    )
    assert plan.launcher == "standard" and plan.hostfile is None and not plan.starts_all_machines
    ddp = tmp_path / "ddp.yaml"
    ddp.write_text("distributed_type: MULTI_GPU\nnum_machines: 2\n")
    assert "needs launch.main_process_ip" in _error(
        multi.check_launch, _multinode(config_file=str(ddp)), SETTINGS, "policy", {"verifier": HTTP}
    )
    plan = multi.check_launch(
        _multinode(config_file=str(ddp), main_process_ip="10.0.0.1"), SETTINGS, "policy", {"verifier": HTTP}
    )
    assert plan.launcher is None and not plan.starts_all_machines


# ------------------------------------------------------------------------------------------------ command, env, files


def _files(tmp_path) -> multi.LaunchFiles:
    return multi.LaunchFiles(tmp_path / "rows.jsonl", tmp_path / "settings.json", tmp_path / "engines.json")


def test_one_machine_command(tmp_path):
    plan = multi.check_launch(TWO, SETTINGS, "policy", {"verifier": HTTP})
    cmd = multi.accelerate_command(TWO, plan, "policy", "/ckpt/p0", _files(tmp_path), tmp_path / "out", "/py")
    assert cmd == [
        "/py",
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "infra/accelerate/zero2.yaml"),
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "-m",
        "dr_core.train.launch",
        "policy",
        "--base",
        "/ckpt/p0",
        "--rows",
        str(tmp_path / "rows.jsonl"),
        "--settings",
        str(tmp_path / "settings.json"),
        "--engines",
        str(tmp_path / "engines.json"),
        "--out",
        str(tmp_path / "out"),
    ]


def test_multinode_command_carries_the_rendezvous_hostfile_and_launcher(tmp_path):
    hosts = tmp_path / "hostfile"
    hosts.write_text("a slots=2\nb slots=2\n")
    launch = _multinode(hostfile=str(hosts), main_process_ip="10.0.0.1", main_process_port=29511)
    plan = multi.check_launch(launch, SETTINGS, "generator", {"verifier": HTTP})
    cmd = multi.accelerate_command(launch, plan, "generator", "/ckpt/g0", _files(tmp_path), tmp_path / "out", "/py")
    head = cmd[: cmd.index("-m", 3)]
    assert head == [
        "/py",
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "infra/accelerate/zero3-multinode.yaml"),
        "--num_processes",
        "4",
        "--num_machines",
        "2",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "10.0.0.1",
        "--main_process_port",
        "29511",
        "--deepspeed_multinode_launcher",
        "pdsh",
        "--deepspeed_hostfile",
        str(hosts),
    ]
    worker = multi.worker_command(cmd, 1)
    assert worker[worker.index("--machine_rank") + 1] == "1" and len(worker) == len(cmd)


def test_the_ranks_environment_withholds_store_credentials_but_passes_engine_keys():
    base = {
        "PATH": "/usr/bin",
        "AWS_SECRET_ACCESS_KEY": "s3-secret",
        "AWS_ACCESS_KEY_ID": "id",
        "HF_TOKEN": "hf",
        "DR_TEST_KEY": "sk-engine",
        "AWS_ENGINE_TOKEN": "kept-by-name",
        "HOME": "/h",
        "PYTHONPATH": "/extra",
    }
    launch = LaunchSettings(num_processes=2, config_file="c.yaml", env={"NCCL_SOCKET_IFNAME": "eth0"})
    env = multi.launch_env(
        launch, base, {"DR_TEST_KEY", "AWS_ENGINE_TOKEN"}, "/venv/bin/python", Path("/repo"), "/cache/ext"
    )
    assert not {"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "HF_TOKEN"} & set(env)
    assert env["DR_TEST_KEY"] == "sk-engine" and env["AWS_ENGINE_TOKEN"] == "kept-by-name" and env["HOME"] == "/h"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env[PROGRESS_ENV] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join(["/repo", "/extra"])
    assert env["PATH"] == os.pathsep.join(["/venv/bin", "/usr/bin"]) and env["TORCH_EXTENSIONS_DIR"] == "/cache/ext"
    # a PATH that already has the environment's bin directory is left as the user ordered it
    assert multi.launch_env(launch, {"PATH": "/mine:/venv/bin"}, python="/venv/bin/python")["PATH"] == "/mine:/venv/bin"


def test_input_files_read_back_as_the_ranks_read_them(tmp_path):
    gen_rows = [GeneratorRow(3, "Say hi.", ("hi", "hello"), ("a1", "a2")), GeneratorRow(5, "Q?", ("x",), ("b", "c"))]
    files = multi.write_inputs(tmp_path / "g", "generator", gen_rows, SETTINGS, {"verifier": HTTP})
    assert load_rows(files.rows, "generator") == gen_rows
    assert GRPOSettings(**json.loads(files.settings.read_text())) == SETTINGS
    assert load_engines_config(files.engines).verifier == HTTP
    pol_rows = [PolicyRow(0, "p0", "Name a fruit."), PolicyRow(1, "p1", 'Quote "this".')]
    gen = HTTP.model_copy(update={"model": "/ckpt/g1"})
    files = multi.write_inputs(tmp_path / "p", "policy", pol_rows, SETTINGS, {"verifier": HTTP, "generator": gen})
    assert load_rows(files.rows, "policy") == pol_rows
    cfg = load_engines_config(files.engines)
    assert (cfg.generator, cfg.verifier) == (gen, HTTP) and "DR_TEST_KEY" in files.engines.read_text()


# ------------------------------------------------------------------------------------------------ collecting results


def _finished_out(tmp_path: Path, ranks: dict[int, list[dict]], history: dict[int, list[dict]]) -> Path:
    out = tmp_path / "out"
    final = out / "final"
    final.mkdir(parents=True)
    result = dict(
        checkpoint=str(final),
        steps=2,
        history=history.get(0, []),
        reward_first=9.0,
        reward_last=9.0,
        seconds=1.0,
        resumed_from=None,
        step_seconds=0.5,
        rollout_stats=None,
        trl_advantages=[],
    )
    (final / "result.json").write_text(json.dumps(result))
    (final / COMPLETE_MARKER).write_text("{}\n")
    for rank, recs in ranks.items():
        (out / f"rollouts.rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for rank, entries in history.items():
        name = "history.jsonl" if rank == 0 else f"history.rank{rank}.jsonl"
        (out / name).write_text("".join(json.dumps(e) + "\n" for e in entries))
    return out


def _rec(step, group, rollout):
    return {"step": step, "group_id": group, "rollout": rollout}


def test_records_come_back_by_step_then_rank_and_history_covers_every_rank(tmp_path):
    ranks = {
        0: [_rec(0, 4, 0), _rec(0, 4, 1), _rec(1, 7, 0), _rec(1, 7, 1)],
        1: [_rec(0, 2, 0), _rec(0, 2, 1), _rec(1, 1, 0), _rec(1, 1, 1)],
    }
    history = {
        0: [{"step": 0, "reward_mean": 1.0, "unscorable": 1}, {"step": 1, "reward_mean": 3.0, "unscorable": 0}],
        1: [{"step": 0, "reward_mean": 2.0, "unscorable": 2}, {"step": 1, "reward_mean": None, "unscorable": 2}],
    }
    out = _finished_out(tmp_path, ranks, history)
    assert multi.finished(out, 2) and not multi.finished(out, 3)
    result, records = multi.collect(out, 2)
    assert [(r["step"], r["group_id"], r["rollout"]) for r in records] == [
        (0, 4, 0),
        (0, 4, 1),
        (0, 2, 0),
        (0, 2, 1),
        (1, 7, 0),
        (1, 7, 1),
        (1, 1, 0),
        (1, 1, 1),
    ]
    assert [(e["step"], e["rank"]) for e in result.history] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sum(e["unscorable"] for e in result.history) == 5
    assert result.reward_first == 1.5 and result.reward_last == 3.0  # the mean over ranks; None left out
    assert result.steps == 2 and result.checkpoint.endswith("final")


def test_a_missing_rank_or_an_unfinished_model_is_an_error_that_says_why(tmp_path):
    out = _finished_out(tmp_path, {0: [_rec(0, 1, 0)]}, {})
    with pytest.raises(multi.LaunchError, match=r"rollouts.rank1.jsonl is missing.*DR_CACHE_DIR"):
        multi.collect(out, 2)
    (out / "final" / COMPLETE_MARKER).unlink()
    with pytest.raises(multi.LaunchError, match="not a complete model"):
        multi.collect(out, 1)


# ------------------------------------------------------------------------------------------------ progress lines


class Recorder:
    def __init__(self):
        self.events = []

    def start(self, key, label, total, unit):
        self.events.append(("start", label, total, unit))

    def advance(self, key, n):
        self.events.append(("advance", n))

    def stop(self, key):
        self.events.append(("stop",))


def test_rank_zero_progress_lines_become_this_process_progress(tmp_path):
    log = tmp_path / "lines"
    with log.open("w") as fh:  # what a rank prints
        previous = progress.set_sink(LineSink(fh))
        try:
            with progress.work("GRPO steps", 2, "steps") as w:
                w.advance()
                w.advance()
        finally:
            progress.set_sink(previous)
    recorder = Recorder()
    previous = progress.set_sink(recorder)
    try:
        mirror = multi.ProgressMirror()
        lines = log.read_text().splitlines() + ["plain output", "DR-PROGRESS not json"]
        consumed = [mirror(line) for line in lines]
        mirror.close()
    finally:
        progress.set_sink(previous)
    assert consumed == [True, True, True, True, False, False]
    assert recorder.events == [("start", "GRPO steps", 2, "steps"), ("advance", 1), ("advance", 1), ("stop",)]


# ------------------------------------------------------------------------------------------------ run_launch


def test_a_failed_launch_raises_with_its_last_lines_and_keeps_its_log(tmp_path):
    code = (
        'import sys; print(\'DR-PROGRESS {"event": "stop", "key": 1}\'); print(\'rank 1: step 0 ok\'); '
        "print('Traceback: GroupSplitError', file=sys.stderr); sys.exit(3)"
    )
    seen = []
    with pytest.raises(multi.LaunchError) as info:
        multi.run_launch(
            [sys.executable, "-c", code],
            os.environ,
            tmp_path,
            60,
            tmp_path / "launch.log",
            on_line=lambda line: seen.append(line) or line.startswith("DR-PROGRESS"),
            what="the test",
        )
    msg = str(info.value)
    assert "the test failed (exit 3)" in msg and "GroupSplitError" in msg and "rank 1: step 0 ok" in msg
    assert "DR-PROGRESS" not in msg and str(tmp_path / "launch.log") in msg
    assert "GroupSplitError" in (tmp_path / "launch.log").read_text() and len(seen) == 3
    assert multi.run_launch([sys.executable, "-c", "print('fine')"], os.environ, tmp_path, 60, tmp_path / "ok.log") >= 0


def test_a_launch_past_its_timeout_is_stopped_with_its_process_group(tmp_path):
    pid_file = tmp_path / "pid"
    # the child starts a grandchild (as accelerate starts ranks) and both sleep
    code = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(120)']); open(sys.argv[1], 'w').write(str(p.pid)); print('started', flush=True); "
        "time.sleep(120)"
    )
    with pytest.raises(TimeoutError, match=r"(?s)ran past launch.timeout_s = 3 s and was stopped.*started"):
        multi.run_launch(
            [sys.executable, "-c", code, str(pid_file)], os.environ, tmp_path, 3, tmp_path / "launch.log", grace_s=2
        )
    grandchild = int(pid_file.read_text())
    try:
        os.kill(grandchild, 0)
        alive = Path(f"/proc/{grandchild}/status").read_text().find("State:\tZ") < 0
    except ProcessLookupError:
        alive = False
    assert not alive, "the rank the launch started outlived it"


def test_a_finished_update_is_read_back_without_launching_again(tmp_path):
    ranks = {0: [_rec(0, 1, 0), _rec(0, 1, 1)], 1: [_rec(0, 0, 0), _rec(0, 0, 1)]}
    out = _finished_out(tmp_path, ranks, {0: [{"step": 0, "reward_mean": 1.0}]})
    got = []
    # a python that does not exist: any launch would fail
    result = multi.launch_train(
        "policy",
        "/ckpt",
        [PolicyRow(0, "p0", "q")],
        SETTINGS,
        out,
        TWO,
        verifier=HTTP,
        generator=HTTP,
        on_rollouts=got.extend,
        python=str(tmp_path / "no-python"),
    )
    assert result.steps == 2 and [(r["group_id"], r["rollout"]) for r in got] == [(1, 0), (1, 1), (0, 0), (0, 1)]
    assert not (out / "launch").exists()
    with pytest.raises(ValueError, match="needs a generator engine config"):
        multi.launch_train("policy", "/ckpt", [], SETTINGS, out, TWO, verifier=HTTP)
