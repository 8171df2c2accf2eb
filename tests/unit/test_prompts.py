"""Prompt layouts: what each role sees, and the verifier's shared-prefix-first layout."""

import os

import dr_core.rubric.prompts as P
from dr_core.constants import MAX_CRITERION_CHARS, MAX_ITEMS
from dr_core.rubric.schema import RUBRIC_JSON_SCHEMA, Rubric, parse_rubric


def _text(messages):
    return "\n".join(m["content"] for m in messages)


def test_module_says_the_templates_are_our_own():
    assert "appendix K" in P.__doc__ and "not public" in P.__doc__


def test_verifier_criterion_last_so_checks_share_a_prefix():
    a = P.verifier_messages("What is 2+2?", "It is 4.", "The answer is correct.")
    b = P.verifier_messages("What is 2+2?", "It is 4.", "The response is polite.")
    ta, tb = _text(a), _text(b)
    shared = os.path.commonprefix([ta, tb])
    assert "It is 4." in shared and "What is 2+2?" in shared
    assert ta.endswith(P.VERIFIER_CRITERION_TEMPLATE.format(criterion="The answer is correct."))
    assert len(shared) > len(ta) - len(P.VERIFIER_CRITERION_TEMPLATE) - 40


def test_naive_layout_shares_only_the_system_prompt():
    a = _text(P.verifier_messages("Q", "R", "first criterion", layout="criterion_first"))
    b = _text(P.verifier_messages("Q", "R", "other criterion", layout="criterion_first"))
    assert "R" not in os.path.commonprefix([a, b]).replace(P.VERIFIER_SYSTEM, "")


def test_dynamic_generator_sees_every_candidate_in_the_given_order_and_no_label():
    msgs = P.dynamic_generator_messages("Prompt text", ["second best", "the best one", "worst"])
    user = msgs[-1]["content"]
    pos = [user.index(c) for c in ["second best", "the best one", "worst"]]
    assert pos == sorted(pos)
    assert "[RESPONSE 1]" in user and "[RESPONSE 3]" in user
    for word in ("chosen", "rejected", "preferred"):
        assert word not in _text(msgs).lower()


def test_static_generator_sees_the_prompt_only():
    user = _text(P.static_generator_messages("Prompt text"))
    assert "Prompt text" in user and "[RESPONSE" not in user


def test_long_texts_are_clipped_and_marked():
    msgs = P.dynamic_generator_messages("p" * 10_000, ["r" * 10_000])
    user = msgs[-1]["content"]
    assert len(user) < P.PROMPT_CHARS + P.CANDIDATE_CHARS + 2000
    assert P.CLIP_MARK in user
    assert P.clip("short", 10) == "short" and len(P.clip("x" * 50, 10)) == 10


def test_example_rubric_is_valid_and_schema_is_tighter_than_the_parser():
    assert isinstance(parse_rubric(P.RUBRIC_EXAMPLE), Rubric)
    rub = P.GENERATOR_JSON_SCHEMA["properties"]["rubrics"]
    assert rub["maxItems"] <= MAX_ITEMS
    assert rub["items"]["properties"]["criterion"]["maxLength"] <= MAX_CRITERION_CHARS
    # the same model's schema: only the two bounds differ
    assert (rub["maxItems"], rub["items"]["properties"]["criterion"]["maxLength"]) == (
        P.MAX_GEN_ITEMS,
        P.MAX_GEN_CRITERION_CHARS,
    )
    base = RUBRIC_JSON_SCHEMA["properties"]["rubrics"]
    assert {k: v for k, v in rub.items() if k not in ("maxItems", "items")} == {
        k: v for k, v in base.items() if k not in ("maxItems", "items")
    }
    assert rub["items"]["properties"]["weight"] == base["items"]["properties"]["weight"]


def test_policy_messages():
    msgs = P.policy_messages("Hello")
    assert msgs[-1] == {"role": "user", "content": "Hello"}


def test_many_candidates_share_one_budget():
    msgs = P.dynamic_generator_messages("p", ["r" * 5000] * 11)
    assert len(msgs[-1]["content"]) < P.CANDIDATES_TOTAL_CHARS + 11 * 40 + 1500


def test_plain_verifier_prompt_is_one_user_turn_with_the_criterion_last():
    a = P.verifier_messages("What is 2+2?", "It is 4.", "The answer is correct.", style="plain")
    b = P.verifier_messages("What is 2+2?", "It is 4.", "The response is polite.", style="plain")
    assert [m["role"] for m in a] == ["user"]
    ta, tb = a[0]["content"], b[0]["content"]
    shared = os.path.commonprefix([ta, tb])
    assert (
        shared.index("[User prompt]")
        < shared.index("What is 2+2?")
        < shared.index("[Response]")
        < shared.index("It is 4.")
    )
    assert ta.endswith(
        "[Criterion]\nThe answer is correct.\n\nDoes the response satisfy this criterion? Answer yes or no."
    )
    assert P.VERIFIER_SYSTEM not in ta


def test_unknown_verifier_prompt_style_is_refused():
    import pytest

    with pytest.raises(ValueError, match="plain"):
        P.verifier_messages("Q", "R", "C", style="fancy")
    with pytest.raises(ValueError, match="shared-prefix-first"):
        P.verifier_messages("Q", "R", "C", style="plain", layout="criterion_first")
