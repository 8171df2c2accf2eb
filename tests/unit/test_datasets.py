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
        (
            "ranked",
            {"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [0.1, 0.9]},
            (2, "scores"),
            "best first",
        ),
        (
            "ranked",
            {"id": "b", "prompt": "p", "responses": ["x", "y"], "scores": [1]},
            (2, "scores"),
            "one per response",
        ),
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
    p = write(
        tmp_path,
        [{"id": "a", "prompt": "p", "responses": ["x"]}]
        + [{"id": f"i{i}", "prompt": "p", "responses": ["x", "y"]} for i in range(5)],
    )
    with pytest.raises(DataError):
        load(p, "ranked")
    assert seen == [1]


def test_missing_empty_and_binary_files(tmp_path):
    with pytest.raises(DataError, match="cannot open"):
        load_ranked(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="no examples"):
        load_ranked(write(tmp_path, [""]))
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b'{"id": "a", "prompt": "p", "responses": ["x", "y"]}\n\xff\xfe\n')
    with pytest.raises(DataError, match="UTF-8") as e:
        load_ranked(bad)
    assert e.value.line == 2  # the line the byte is on (lines are decoded one by one, not in read-ahead chunks)
    with pytest.raises(ValueError, match="unknown format"):
        load(bad, "nope")


# -- values json.loads accepts but no format can use: refused at load, with the field path ----------------------------
RANKED = '{"id": "a", "prompt": "p", "responses": ["x", "y"]'  # a ranked line, its closing brace left off


@pytest.mark.parametrize(
    "tail, field, fragment",
    [
        (', "scores": [NaN, 1]}', "scores[0]", "NaN is not a finite number"),
        (', "scores": [2, Infinity]}', "scores[1]", "Infinity is not a finite number"),
        (', "scores": [-Infinity, 1]}', "scores[0]", "-Infinity is not a finite number"),
        (', "scores": [1e400, 1]}', "scores[0]", "overflows to infinity"),
        (', "scores": [1, -1e999]}', "scores[1]", "overflows to infinity"),
        (', "scores": [1' + "0" * 400 + ", 1]}", "scores[0]", "too large for a float"),  # an int: float() overflows
        (', "scores": [1' + "0" * 5000 + ", 1]}", "scores[0]", "more than 4300 digits"),
        (', "scores": [1, "2"]}', "scores[1]", "expected a number, got str"),
        (', "scores": [true, 1]}', "scores[0]", "expected a number, got bool"),
        (', "source": "\\ud800"}', "source", "lone surrogate '\\ud800'"),
        (', "extra": {"deep": [0, NaN]}}', "extra.deep[1]", "NaN"),  # an unknown field too: anywhere in the line
        (', "extra": "ok \\udfff"}', "extra", "lone surrogate"),
        (', "\\udc80": 1}', "\\udc80", "key has a lone surrogate"),  # the field shown escaped: printable
        (', "prompt": "again"}', "prompt", "key given twice"),
    ],
)
def test_non_finite_numbers_surrogates_and_duplicate_keys_are_refused(tmp_path, tail, field, fragment):
    p = write(tmp_path, [{"id": "z", "prompt": "p", "responses": ["x", "y"]}, RANKED + tail])
    with pytest.raises(DataError) as e:
        load_ranked(p)
    assert (e.value.line, e.value.field) == (2, field.encode().decode("unicode_escape") if "\\u" in field else field)
    assert fragment in str(e.value) and f"{p}:2: field '{field}'" in str(e.value)
    str(e.value).encode("utf-8")  # the message itself can always be printed


@pytest.mark.parametrize("fmt", ["pairwise", "listwise", "sets", "prompts", "policy_eval", "verifiable"])
def test_every_format_refuses_non_finite_and_surrogates(tmp_path, fmt):
    for value, fragment in [("NaN", "NaN"), ("1e400", "overflows"), ('"\\ud83d"', "lone surrogate")]:
        p = tmp_path / f"{fmt}.jsonl"
        p.write_text(
            '{"id": "a", "prompt": "p", "chosen": "c", "rejected": "r", "best": "b", "others": ["o"], '
            f'"responses": ["r"], "answer": "1", "note": {value}}}\n',
            encoding="utf-8",
        )
        with pytest.raises(DataError) as e:
            load(p, fmt)
        assert (e.value.line, e.value.field) == (1, "note") and fragment in e.value.message


def test_numeric_answer_overflowing_is_refused_not_stringified(tmp_path):
    p = write(tmp_path, ['{"prompt": "p", "answer": 1e400}'])
    with pytest.raises(DataError) as e:
        load(p, "verifiable")
    assert (e.value.line, e.value.field) == (1, "answer")  # not the string 'inf' as a reference answer


def test_paired_surrogates_and_big_but_convertible_ints_are_fine(tmp_path):
    p = write(
        tmp_path,
        [
            '{"id": ' + "9" * 4000 + ', "prompt": "smile \\ud83d\\ude00", "responses": ["x", "y"], '
            '"scores": [1e308, -1e308]}'
        ],
    )
    row = load_ranked(p)[0]
    assert row.id == "9" * 4000 and row.prompt == "smile \U0001f600" and row.scores == (1e308, -1e308)


@pytest.mark.parametrize("line", ["[" * 100_000, '{"a": ' * 100_000, "[" * 5000 + "]" * 5000])
def test_deep_nesting_is_a_data_error_not_a_recursion_error(tmp_path, line):
    p = write(tmp_path, [{"id": "z", "prompt": "p", "responses": ["x", "y"]}, line])
    with pytest.raises(DataError) as e:
        load_ranked(p)
    assert e.value.line == 2 and "nested too deeply" in e.value.message


def test_huge_integer_id_names_the_field(tmp_path):
    p = write(tmp_path, ['{"id": ' + "1" * 5000 + ', "prompt": "p", "responses": ["x", "y"]}'])
    with pytest.raises(DataError) as e:
        load_ranked(p)
    assert (e.value.line, e.value.field) == (1, "id") and "too long" in e.value.message
    assert len(str(e.value)) < 200  # the digits are not all echoed back


@pytest.mark.parametrize(
    "row, fragment",
    [
        ({"id": True, "prompt": "p", "responses": ["x", "y"]}, "got bool"),
        ({"id": 1.5, "prompt": "p", "responses": ["x", "y"]}, "got float"),
        ({"id": None, "prompt": "p", "responses": ["x", "y"]}, "got NoneType"),
        ({"id": ["a"], "prompt": "p", "responses": ["x", "y"]}, "got list"),
    ],
)
def test_ids_must_be_strings_or_integers(tmp_path, row, fragment):
    with pytest.raises(DataError) as e:
        load_ranked(write(tmp_path, [row]))
    assert (e.value.line, e.value.field) == (1, "id") and fragment in e.value.message


def test_byte_order_mark_allowed_and_bad_byte_reported_on_its_line(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(
        b'\xef\xbb\xbf{"id": "a", "prompt": "p", "responses": ["x", "y"]}\r\n'
        b'{"id": "b", "prompt": "p", "responses": ["x", "y"]}\r\n'
    )
    assert [r.id for r in load_ranked(p)] == ["a", "b"]
    lines = [json.dumps({"id": f"i{i}", "prompt": "p" * 50, "responses": ["x", "y"]}).encode() for i in range(500)]
    lines[400] = lines[400].replace(b'"p', b'"\xc3(', 1)  # an invalid UTF-8 sequence, far past the first read chunk
    p.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError) as e:
        load_ranked(p)
    assert e.value.line == 401 and "not UTF-8" in e.value.message and "0xc3" in e.value.message


def test_whole_file_errors_have_no_line_number(tmp_path):
    with pytest.raises(DataError) as e:
        load_ranked(write(tmp_path, ["", "  "]))
    assert str(e.value) == f"{tmp_path / 'data.jsonl'}: no examples in file"
    with pytest.raises(DataError, match="cannot open"):
        load_ranked(tmp_path)  # a directory


def test_prompt_rows_know_their_line(tmp_path):
    rows = load(
        write(tmp_path, ["", {"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q", "baseline": "x"}]), "prompts"
    )
    assert [r.line for r in rows] == [2, 3]
    from dr_core.datasets import PromptRow

    assert rows[0] == PromptRow("a", "p")  # the line is not part of a row's value


def test_parse_line_is_the_shared_line_check():
    from dr_core.datasets import parse_line

    assert parse_line("f.jsonl", 1, '{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    with pytest.raises(DataError, match=r"f.jsonl:7: field 'a\[1\]': NaN"):
        parse_line("f.jsonl", 7, '{"a": [1, NaN]}')
