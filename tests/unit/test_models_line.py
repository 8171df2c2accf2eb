"""One default evaluator: every command that runs models takes ``--preset`` (tiny by default) and, without an
``--engines`` file, runs the preset's roles; each says which models in one line (``models: ...``, built by
dr_core/config/presets.py from an EnginesConfig). Checked here without a model: the models are intercepted where
they would start."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core.config import EnginesConfig, engine_config, preset
from dr_core.config.presets import engines_line, models_line, roles, roles_source

runner = CliRunner()

TINY_LINE = (
    "models: preset tiny — generator smollm2-135m-instruct, verifier qwen2.5-coder-0.5b-instruct (plain prompt, "
    "balanced verdicts), policy smollm2-135m-instruct"
)


def test_the_models_line_names_each_role_and_the_verifiers_procedure(tmp_path):
    assert engines_line(roles("tiny"), roles_source("tiny")) == TINY_LINE
    remote = engine_config(kind="openai_http", base_url="http://user:secret@10.0.0.5:8000/v1", model="Qwen/Qwen3-8B")
    cfg = EnginesConfig(generator=remote, verifier=engine_config(model="default"))
    line = engines_line(cfg, roles_source("tiny", tmp_path / "e.yaml"), ("generator", "verifier"))
    assert line == (
        f"models: engines file {tmp_path / 'e.yaml'} — generator Qwen/Qwen3-8B at http://10.0.0.5:8000/v1, "
        "verifier smollm2-135m-instruct (system prompt, choice verdicts)"
    )
    assert "secret" not in line
    assert models_line("x", [("judge", "j")]) == "models: x — judge j"
    (tmp_path / "e.yaml").write_text("verifier: {model: qwen2.5-coder-0.5b-instruct}\n")
    assert roles("paper", tmp_path / "e.yaml").verifier.model == "qwen2.5-coder-0.5b-instruct"  # the file wins
    with pytest.raises(ValueError, match="unknown preset"):
        roles("huge")


class _Stop(Exception):
    """Raised where a model (or a flow) would start: what the command resolved has been recorded."""


@pytest.fixture()
def intercepted(monkeypatch, tmp_path):
    """Every place a model command would start its models, replaced by a recorder; the environment restored."""
    import flows.coevolve
    import flows.round
    from dr_core.engines.pool import EnginePool

    seen: dict = {}

    def open_roles(self, config, which):
        seen["engines"] = config
        raise _Stop

    def get(self, cfg):
        seen.setdefault("get", cfg)
        raise _Stop

    def flow(params):
        seen["engines"] = getattr(params.config, "round", params.config).engines
        raise _Stop

    def service(config, store, settings, *, log, **_kw):
        seen["engines"] = config
        log("serving")
        return 0

    monkeypatch.setattr(EnginePool, "open_roles", open_roles)
    monkeypatch.setattr(EnginePool, "get", get)
    monkeypatch.setattr(flows.round, "round_flow", flow)
    monkeypatch.setattr(flows.coevolve, "coevolve_flow", flow)
    monkeypatch.setattr("dr_core.service.server.serve", service)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sets.jsonl").write_text(json.dumps({"id": "a", "prompt": "Hi?", "responses": ["Hi.", "No."]}) + "\n")
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"id": "a", "prompt": "Hi?", "chosen": "Hi.", "rejected": "No."}))
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "a", "prompt": "Hi?", "baseline": "Hello."}) + "\n")
    (tmp_path / "answers.jsonl").write_text(json.dumps({"id": "a", "answer": "Hi."}) + "\n")
    saved = dict(os.environ)
    yield seen
    os.environ.clear()
    os.environ.update(saved)


POLICY = ["eval-policy", "--data", "data.jsonl", "--judge", "default"]
COMMANDS = {
    "score": (["score", "sets.jsonl", "-o", "out.jsonl"], ("generator", "verifier")),
    "eval-evaluator": (
        ["eval-evaluator", "pairs.jsonl", "--format", "pairwise", "-o", "m.json"],
        ("generator", "verifier"),
    ),
    "serve": (["serve", "--store", "store"], ("generator", "verifier")),
    "round": (["round", "--store", "store"], ("generator", "verifier", "policy")),
    "coevolve": (["coevolve", "--store", "store"], ("generator", "verifier", "policy")),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_without_an_engines_file_a_command_runs_the_tiny_presets_roles(intercepted, command):
    argv, which = COMMANDS[command]
    res = runner.invoke(app, argv)
    assert isinstance(res.exception, _Stop) or res.exit_code == 0, (res.output, res.exception)
    tiny = preset("tiny").engines
    assert all(getattr(intercepted["engines"], role) == getattr(tiny, role) for role in which)
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("models: ")]
    assert line == engines_line(tiny, "preset tiny", which)
    assert TINY_LINE.startswith(line) or command in ("round", "coevolve")


@pytest.mark.parametrize(
    "argv, role, model",
    [
        (POLICY + ["--policy", "default"], "policy", "smollm2-135m-instruct"),
        (POLICY + ["--policy", "answers.jsonl"], "verifier", "qwen2.5-coder-0.5b-instruct"),
    ],
)
def test_eval_policy_default_names_the_presets_policy_and_verifier(intercepted, argv, role, model):
    res = runner.invoke(app, argv)
    assert isinstance(res.exception, _Stop), (res.output, res.exception)
    want = getattr(preset("tiny").engines, role)
    got = intercepted["get"]  # the first engine asked for: the policy's, or (saved answers) the judge's
    assert got.model == want.model and got.kv_cache_gib == want.kv_cache_gib
    if role == "verifier":
        assert got.dtype == "float32"  # the judge reads its log-odds from float32 logits
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("models: ")]
    assert line.startswith("models: preset tiny — policy ")
    assert line.endswith("judge qwen2.5-coder-0.5b-instruct (logodds in both orders)")
    assert model in line
