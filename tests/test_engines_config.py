"""Engine config validation, make_engine's lazy plug-in point, and the default model's checks (no model loaded)."""

import sys

import pytest
from pydantic import ValidationError

from dr_core import model as M
from dr_core.config import ConfigError, EngineConfig, EnginesConfig, engine_config, load_engines_config


def test_defaults_are_the_cpu_settings():
    c = EngineConfig()
    assert (c.kind, c.model, c.dtype, c.enforce_eager, c.prefix_caching) == ("vllm", "default", "float32", True, True)
    with pytest.raises(ValidationError):
        c.dtype = "bfloat16"  # frozen


@pytest.mark.parametrize(
    "fields, hint",
    [
        ({"kind": "openai_http"}, "needs base_url"),
        ({"kind": "openai_http", "base_url": "localhost:8000"}, "http://"),
        ({"base_url": "http://x/v1"}, "only used with kind 'openai_http'"),
        ({"model": "/nonexistent/dir"}, "nor a Hugging Face checkpoint directory"),
        ({"model": "  "}, "model is empty"),
        ({"max_model_len": 10}, "max_model_len"),
        ({"dtpye": "float32"}, "dtpye"),
    ],
)
def test_bad_configs_say_how_to_fix(fields, hint):
    with pytest.raises(ConfigError, match=hint):
        engine_config(**fields)


def test_local_checkpoint_dir_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert engine_config(model=str(tmp_path)).model == str(tmp_path)


def test_engines_file_per_role(tmp_path):
    f = tmp_path / "engines.yaml"
    f.write_text("verifier:\n  kind: openai_http\n  base_url: http://127.0.0.1:8000/v1\n  model: judge\n")
    cfg = load_engines_config(f)
    assert cfg.verifier.kind == "openai_http" and cfg.generator == EngineConfig() and cfg.policy == EngineConfig()
    assert load_engines_config(None) == EnginesConfig()
    f.write_text("verifier:\n  kind: openai_http\n")
    with pytest.raises(ConfigError, match=r"engines.yaml.*\n.*verifier.*base_url"):
        load_engines_config(f)
    f.write_text("judge: {}\n")
    with pytest.raises(ConfigError, match="judge"):
        load_engines_config(f)


def test_make_engine_imports_implementations_lazily():
    import subprocess

    code = "import sys, dr_core.engines, dr_core.evaluator.score, dr_core.evaluator.calibrate, dr_core.runs.evaluate; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
