"""Loaders: every format reads; a malformed line names file, line and field, and nothing after it is read."""

import json

import pytest

from dr_core.datasets import DataError, load, load_listwise, load_pairwise, load_ranked, load_sets
from dr_core.paths import bundled


def write(tmp_path, rows, name="data.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return p


def test_bundled_files_load():
    ranked = load_ranked(bundled("anchors_alpacaeval.jsonl"))
    assert len(ranked) == 48 and all(len(r.responses) == 11 for r in ranked)
    assert ranked[0].scores[0] >= ranked[0].scores[-1]
    pairs = load_pairwise(bundled("eval_hh_harmless_pairs.jsonl"))
    assert len(pairs) == 40 and pairs[0].chosen != pairs[0].rejected
    assert load(bundled("policy_eval_arenahard.jsonl"), "policy_eval")[0].baseline


def test_each_format(tmp_path):
    assert load_ranked(write(tmp_path, [{"id": "a", "prompt": "p", "responses": ["x", "y"]}]))[0].scores is None
    lw = load_listwise(write(tmp_path, [{"id": 7, "prompt": "p", "best": "b", "others": ["o1", "o2"]}]))
    assert lw[0].id == "7" and lw[0].others == ("o1", "o2")
    assert load_sets(write(tmp_path, [{"id": "s", "prompt": "p", "responses": ["r"]}, ""]))[0].responses == ("r",)


def test_limit_still_validates_the_whole_file(tmp_path):
    good = {"id": "a", "prompt": "p", "chosen": "c", "rejected": "r"}
    p = write(tmp_path, [good, {**good, "id": "b"}, {"id": "c", "prompt": "p", "chosen": "c"}])
    with pytest.raises(DataError) as e:
        load_pairwise(p, limit=1)
    assert e.value.line == 3 and e.value.field == "rejected"


@pytest.mark.parametrize(
    "fmt, row, line_field, fragment",
    [
        ("ranked", "{not json", (2, None), "invalid JSON"),
        ("ranked", "[1, 2]", (2, None), "JSON object"),
        ("ranked", {"id": "b", "prompt": "p", "responses": ["only one"]}, (2, "responses"), "at least 2"),
        ("ranked", {"id": "b", "prompt": "p", "responses": "x"}, (2, "responses"), "list"),
        ("ranked", {"id": "b", "prompt": "p", "responses": ["x", ""]}, (2, "responses[1]"), "non-empty"),
        ("ranked", {"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [0.1, 0.9]}, (2, "scores"), "best first"),
        ("ranked", {"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1]}, (2, "scores"), "one per response"),
        ("ranked", {"id": "a", "prompt": "p", "responses": ["x", "y"]}, (2, "id"), "duplicate"),
        ("ranked", {"id": "b", "responses": ["x", "y"]}, (2, "prompt"), "missing"),
        ("ranked", {"id": "b", "prompt": 3, "responses": ["x", "y"]}, (2, "prompt"), "string"),
        ("pairwise", {"id": "b", "prompt": "p", "chosen": " ", "rejected": "r"}, (2, "chosen"), "empty"),
        ("listwise", {"id": "b", "prompt": "p", "best": "b", "others": []}, (2, "others"), "at least 1"),
        ("sets", {"prompt": "p", "responses": ["r"]}, (2, "id"), "missing"),
    ],
)
def test_malformed_line_names_file_line_and_field(tmp_path, fmt, row, line_field, fragment):
    first = {
        "ranked": {"id": "a", "prompt": "p", "responses": ["x", "y"]},
        "pairwise": {"id": "a", "prompt": "p", "chosen": "c", "rejected": "r"},
        "listwise": {"id": "a", "prompt": "p", "best": "b", "others": ["o"]},
        "sets": {"id": "a", "prompt": "p", "responses": ["r"]},
    }[fmt]
    p = write(tmp_path, [first, row])
    with pytest.raises(DataError) as e:
        load(p, fmt)
    assert (e.value.line, e.value.field) == line_field
    assert str(p) in str(e.value) and fragment in str(e.value)


def test_reading_stops_at_the_first_bad_line(tmp_path, monkeypatch):
    import dr_core.datasets as ds

    seen = []
    orig = ds._ranked

    def spy(ln):
        seen.append(ln.lineno)
        return orig(ln)

    monkeypatch.setattr(ds, "_PARSERS", {**ds._PARSERS, "ranked": spy})
    p = write(tmp_path, [{"id": "a", "prompt": "p", "responses": ["x"]}] + [{"id": f"i{i}", "prompt": "p", "responses": ["x", "y"]} for i in range(5)])
    with pytest.raises(DataError):
        load(p, "ranked")
    assert seen == [1]


def test_missing_empty_and_binary_files(tmp_path):
    with pytest.raises(DataError, match="cannot open"):
        load_ranked(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="no examples"):
        load_ranked(write(tmp_path, [""]))
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b'{"id": "a"}\n\xff\xfe\n')
    with pytest.raises(DataError, match="UTF-8"):
        load_ranked(bad)
    with pytest.raises(ValueError, match="unknown format"):
        load(bad, "nope")
