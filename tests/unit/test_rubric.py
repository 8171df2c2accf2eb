"""The rubric parser: one test per malformed output shape, strict and recovering modes."""

import json

import pytest

from dr_core.constants import MAX_CRITERION_CHARS, MAX_ITEMS, WEIGHT_MAX, WEIGHT_MIN
from dr_core.rubric.schema import (
    RUBRIC_JSON_SCHEMA,
    ParseFailure,
    Rubric,
    RubricError,
    RubricItem,
    format_rubric_lines,
    parse_rubric,
    rubric_json_schema,
)

GOOD = '{"rubrics": [{"criterion": "Names a Broadway debut", "weight": 5}, {"criterion": "Is a list", "weight": 1}]}'


def items(*pairs):
    return json.dumps({"rubrics": [{"criterion": c, "weight": w} for c, w in pairs]})


def test_valid_rubric_parses():
    r = parse_rubric(GOOD)
    assert isinstance(r, Rubric)
    assert r.weights == [5, 1] and r.criteria == ["Names a Broadway debut", "Is a list"] and r.dropped == 0


def test_bare_list_and_fenced_block_accepted():
    assert isinstance(parse_rubric('[{"criterion": "A", "weight": 2}]'), Rubric)
    assert isinstance(parse_rubric("```json\n" + GOOD + "\n```"), Rubric)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", ParseFailure.EMPTY_OUTPUT),
        ("   \n", ParseFailure.EMPTY_OUTPUT),
        (None, ParseFailure.EMPTY_OUTPUT),
        (GOOD[:-20], ParseFailure.TRUNCATED_JSON),
        ("The response should be polite.", ParseFailure.NOT_JSON),
        ('{"criteria": []}', ParseFailure.WRONG_SHAPE),
        ('"just a string"', ParseFailure.WRONG_SHAPE),
        ('{"rubrics": []}', ParseFailure.EMPTY_LIST),
        (items(*[(f"c{i}", 1) for i in range(MAX_ITEMS + 1)]), ParseFailure.TOO_MANY_ITEMS),
        ('{"rubrics": ["not an object"]}', ParseFailure.WRONG_SHAPE),
        ('{"rubrics": [{"criterion": "A"}]}', ParseFailure.MISSING_FIELD),
        ('{"rubrics": [{"weight": 3}]}', ParseFailure.MISSING_FIELD),
        (items(("  ", 3)), ParseFailure.EMPTY_CRITERION),
        (items(("x" * (MAX_CRITERION_CHARS + 1), 3)), ParseFailure.CRITERION_TOO_LONG),
        (items(("A", 2.5)), ParseFailure.WEIGHT_NOT_INTEGER),
        (items(("A", "3")), ParseFailure.WEIGHT_NOT_INTEGER),
        (items(("A", True)), ParseFailure.WEIGHT_NOT_INTEGER),
        (items(("A", 0)), ParseFailure.WEIGHT_OUT_OF_RANGE),
        (items(("A", 6)), ParseFailure.WEIGHT_OUT_OF_RANGE),
        (items(("Is concise.", 2), ("is  CONCISE", 3)), ParseFailure.DUPLICATE_CRITERIA),
    ],
)
def test_each_malformed_shape_has_a_precise_reason(text, reason):
    r = parse_rubric(text)
    assert isinstance(r, RubricError)
    assert r.reason is reason, str(r)


def test_integral_float_weight_is_accepted():
    assert parse_rubric(items(("A", 3.0))).weights == [3]


def test_recover_keeps_complete_items_of_truncated_json():
    text = GOOD[:-20]
    r = parse_rubric(text, recover=True)
    assert isinstance(r, Rubric)
    assert r.criteria == ["Names a Broadway debut"] and r.dropped == 1


def test_recover_reads_line_format_and_counts_bad_lines():
    text = "Rubric:\n1. [3] Mentions the date\n- [9] Out of range weight\n* [2] Uses a list\n[2] uses a list\n"
    r = parse_rubric(text, recover=True)
    assert isinstance(r, Rubric)
    assert r.criteria == ["Mentions the date", "Uses a list"] and r.weights == [3, 2]
    assert r.dropped == 2  # the weight-9 line and the duplicate


def test_recover_with_nothing_usable_is_a_failure():
    r = parse_rubric("I think both answers are fine.", recover=True)
    assert isinstance(r, RubricError) and r.reason is ParseFailure.NO_RECOVERABLE_ITEM


def test_strict_is_default_even_when_recoverable():
    assert isinstance(parse_rubric("[3] Mentions the date"), RubricError)


def test_round_trip_and_line_format():
    r = parse_rubric(GOOD)
    assert parse_rubric(r.to_json()) == r
    assert format_rubric_lines(r) == "[5] Names a Broadway debut\n[1] Is a list"
    assert parse_rubric(format_rubric_lines(r), recover=True).items == r.items


def test_schema_is_bounded():
    rub = RUBRIC_JSON_SCHEMA["properties"]["rubrics"]
    assert rub["maxItems"] == MAX_ITEMS and rub["items"]["properties"]["criterion"]["maxLength"] == MAX_CRITERION_CHARS
    w = rub["items"]["properties"]["weight"]
    assert (w["minimum"], w["maximum"]) == (1, 5)


def test_schema_from_the_model_is_the_plain_schema_engines_were_sent():
    item = {
        "type": "object",
        "properties": {
            "criterion": {"type": "string", "minLength": 1, "maxLength": MAX_CRITERION_CHARS},
            "weight": {"type": "integer", "minimum": WEIGHT_MIN, "maximum": WEIGHT_MAX},
        },
        "required": ["criterion", "weight"],
        "additionalProperties": False,
    }
    rubrics = {"type": "array", "minItems": 1, "maxItems": MAX_ITEMS, "items": item}
    expected = {
        "type": "object",
        "properties": {"rubrics": rubrics},
        "required": ["rubrics"],
        "additionalProperties": False,
    }
    assert RUBRIC_JSON_SCHEMA == expected
    assert "$ref" not in json.dumps(RUBRIC_JSON_SCHEMA) and "title" not in json.dumps(RUBRIC_JSON_SCHEMA)
    tight = rubric_json_schema(max_items=3, max_criterion_chars=50)
    assert tight["properties"]["rubrics"]["maxItems"] == 3 and RUBRIC_JSON_SCHEMA == expected
    assert tight["properties"]["rubrics"]["items"]["properties"]["criterion"]["maxLength"] == 50


@pytest.mark.parametrize(
    "kwargs", [dict(max_items=MAX_ITEMS + 1), dict(max_criterion_chars=MAX_CRITERION_CHARS + 1), dict(max_items=0)]
)
def test_schema_cannot_be_looser_than_the_parser(kwargs):
    with pytest.raises(ValueError):
        rubric_json_schema(**kwargs)


@pytest.mark.parametrize("weight", ["Infinity", "-Infinity", "NaN", "1e400", "[3]", "{}", "null"])
def test_parser_is_total_on_non_finite_and_odd_weights(weight):
    r = parse_rubric('{"rubrics": [{"criterion": "A", "weight": %s}]}' % weight)
    assert isinstance(r, RubricError) and r.reason is ParseFailure.WEIGHT_NOT_INTEGER, str(r)


def test_failure_details_name_the_item_and_the_bound():
    out_of_range = f"weight_out_of_range: item 1: weight 6.0 not in {WEIGHT_MIN}..{WEIGHT_MAX}"
    assert str(parse_rubric(items(("A", 2), ("B", 6.0)))) == out_of_range
    long = MAX_CRITERION_CHARS + 1
    assert (
        str(parse_rubric(items(("x" * long, 2)))) == f"criterion_too_long: item 0: {long} > {MAX_CRITERION_CHARS} chars"
    )
    assert str(parse_rubric('{"rubrics": [{"criterion": 5}]}')) == "missing_field: item 0 has no 'weight'"
    assert str(parse_rubric('{"rubrics": [{"criterion": 5, "weight": 1}]}')) == "empty_criterion: item 0"
    extra = '{"rubrics": [{"criterion": " A ", "weight": 1, "note": "extra keys are ignored"}]}'
    assert parse_rubric(extra).criteria == ["A"]


@pytest.mark.parametrize(
    "kwargs", [dict(criterion="A", weight=0), dict(criterion="", weight=2), dict(criterion="A", weight=2.0)]
)
def test_rubric_item_validates(kwargs):
    with pytest.raises(ValueError):
        RubricItem(**kwargs)
