"""``dr_core.runs.refs.unavailable``: what a (cached) step result points at that the store no longer holds as the
step wrote it. A real local store; the S3 path is the same code over fsspec (tests/integration/test_faults.py runs
the whole re-run on a lost part)."""

from __future__ import annotations

from dr_core.constants import COMPLETE_MARKER
from dr_core.runs.refs import CheckpointRef, RoundInputs, unavailable, write_ref
from dr_core.store.artifacts import Store


def _inputs(store: Store) -> RoundInputs:
    prompts = write_ref(
        store,
        "prompts",
        [{"dataset": "d", "prompt_id": "p1", "prompt": "hi", "baseline": None}],
        "selected",
        dataset="d",
    )
    anchors = write_ref(
        store,
        "prompts",
        [{"dataset": "d", "prompt_id": "p2", "prompt": "yo", "baseline": None}],
        "anchors",
        dataset="d",
    )
    return RoundInputs(prompts=prompts, anchors=anchors)


def test_everything_there_is_no_problem(tmp_path):
    store = Store.from_url(str(tmp_path / "store"))
    inputs = _inputs(store)
    assert unavailable(inputs, store) == []
    assert unavailable({"a": [inputs.prompts], "b": (inputs.anchors, 3)}, store) == []


def test_a_missing_and_a_changed_part_are_named(tmp_path):
    store = Store.from_url(str(tmp_path / "store"))
    inputs = _inputs(store)
    store.remove(inputs.prompts.uri)
    other = write_ref(
        store,
        "prompts",
        [{"dataset": "d", "prompt_id": "p9", "prompt": "no", "baseline": None}],
        "anchors",
        dataset="d",
    )  # the same file, other rows
    assert other.uri == inputs.anchors.uri and other.sha256 != inputs.anchors.sha256
    problems = unavailable(inputs, store)
    assert problems[0] == f"{inputs.prompts.uri} is missing"
    assert problems[1].startswith(f"{inputs.anchors.uri} holds other bytes") and inputs.anchors.sha256 in problems[1]


def test_a_checkpoint_needs_its_marker_and_other_locations_are_not_checked(tmp_path):
    store = Store.from_url(str(tmp_path / "store"))
    uri = f"{store.url}/models/run_id=r/round=1/policy"
    ref = CheckpointRef(uri=uri, fingerprint="x")
    assert unavailable(ref, store) == [f"checkpoint {uri} is missing or incomplete (no {COMPLETE_MARKER})"]
    folder = tmp_path / "store" / "models" / "run_id=r" / "round=1" / "policy"
    folder.mkdir(parents=True)
    (folder / COMPLETE_MARKER).write_text("complete\n")
    assert unavailable(ref, store) == []
    bundled = CheckpointRef(uri="smollm2-135m-instruct", fingerprint="y")
    elsewhere = CheckpointRef(uri=str(tmp_path / "start"), fingerprint="z")
    assert unavailable([bundled, elsewhere], store) == []
