"""The tiny preset's verifier on the real model: Qwen2.5-Coder-0.5B-Instruct (prepared from its hash-checked wheels)
under in-process vLLM, with the preset's procedure (plain prompt, balanced verdicts). What it must do is what the
default SmolLM2 verifier could not: give verdicts that vary, so scores can differ."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_verifier():
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    from dr_core.config import preset
    from dr_core.engines import make_engine
    from dr_core.model import ModelError, prepare

    verifier = preset("tiny").engines.verifier
    try:
        prepare(verifier.model)
    except ModelError as exc:
        pytest.skip(f"{verifier.model} unavailable: {exc}")
    engine = make_engine(verifier.model_copy(update={"max_model_len": 2048}))
    yield engine
    engine.close()


def test_balanced_verdicts_vary_and_split_the_probe_in_half(tiny_verifier):
    from dr_core.evaluator.calibrate import probe_checks, verdict_bias
    from dr_core.evaluator.items import Check
    from dr_core.evaluator.verify import verify

    probe = probe_checks()
    verdicts, stats = verify(tiny_verifier, probe)
    assert None not in verdicts
    assert sum(verdicts) == len(probe) // 2  # the threshold is the probe's own median log-odds (no ties measured)
    bias = verdict_bias(tiny_verifier, mode="balanced")
    assert bias is not None and -5 < bias < 5
    # on the main job's kind of data (a policy answer and criteria about it) the verdicts differ across criteria
    checks = [
        Check("Name three primary colours.", "Red, blue and yellow.", c)
        for c in (
            "The response names exactly three colours.",
            "The response is written in French.",
            "The response mentions red.",
            "The response is longer than 500 words.",
        )
    ]
    out, _ = verify(tiny_verifier, checks)
    assert None not in out and 0 < sum(out) < len(out), out
