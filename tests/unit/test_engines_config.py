"""Engine config validation, make_engine's lazy plug-in point, and the default model's checks (no model loaded)."""

import sys

import pytest
from pydantic import ValidationError

from dr_core.config import ConfigError, EngineConfig, EnginesConfig, engine_config, load_engines_config


def test_defaults_are_the_cpu_settings():
    from dr_core.config.numerics import auto_dtype

    c = EngineConfig()
    assert (c.kind, c.model, c.dtype, c.enforce_eager, c.prefix_caching) == (
        "vllm",
        "default",
        auto_dtype(),
        True,
        True,
    )
    with pytest.raises(ValidationError):
        c.dtype = "bfloat16"  # frozen


def test_dtype_auto_is_resolved_into_the_config_and_its_identity(monkeypatch):
    """'auto' becomes the machine's dtype when the config is built: it is what the config holds, records and hashes,
    so a float32 engine and a bf16 engine are two engines (two pool keys, two cache keys), never one."""
    from dr_core.config import numerics

    for native, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(numerics, "bf16_reason", lambda native=native: (native, "test"))
        c = EngineConfig()
        assert c.dtype == dtype and f'"dtype":"{dtype}"' in c.model_dump_json()
        assert EngineConfig(**c.model_dump()) == c  # a recorded config reads back as the same engine
    assert EngineConfig(dtype="float32") != EngineConfig(dtype="bfloat16")
    assert len({EngineConfig(dtype="float32"), EngineConfig(dtype="bfloat16")}) == 2
    assert EngineConfig(dtype="float32").dtype == "float32"  # an explicit choice is kept
    # a remote engine's dtype is the server's: 'auto' stays as given, and no machine fact enters its identity
    assert EngineConfig(kind="openai_http", base_url="http://127.0.0.1:1/v1").dtype == "auto"


def test_cpu_bf16_detection_reads_the_flags(tmp_path, monkeypatch):
    from dr_core.config import numerics

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert "avx512_bf16" in numerics.cpu_flags(str(info))
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n")
    assert numerics.cpu_flags(str(info)) == {"fpu", "avx2", "fma"}
    assert numerics.cpu_flags(str(tmp_path / "missing")) == frozenset()
    monkeypatch.setattr(numerics, "_cuda_machine", lambda: False)
    monkeypatch.setattr(numerics, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    numerics.bf16_reason.cache_clear()
    try:
        native, why = numerics.bf16_reason()
        assert not native and "no bf16 instructions" in why
        monkeypatch.setattr(numerics, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
        numerics.bf16_reason.cache_clear()
        assert numerics.bf16_reason() == (True, "the CPU has amx_bf16")
        assert numerics.auto_dtype() == "bfloat16"
    finally:
        numerics.bf16_reason.cache_clear()


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

    code = (
        "import sys, dr_core.engines, dr_core.evaluator.score, dr_core.evaluator.calibrate, dr_core.evals.evaluate; "
        "print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
