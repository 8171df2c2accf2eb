"""Verifiable tasks: final-answer extraction and the three matchers on a hand-made set with known answers,
equivalent forms included ("1/2" vs "0.5" vs "\\frac{1}{2}"), and the loader that refuses an unreadable reference."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dr_core.datasets import DataError
from dr_core.evals.policy_eval import Answer, load_verifiable, score_verifiable
from dr_core.evaluator import answers as A

pytest.importorskip("math_verify", reason="math-verify (in the cpu/gpu extras) is not installed")


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{42}", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # the last one, nested braces kept
        (r"\fbox{x+1}", "x+1"),
        (r"\boxed{\frac{1}{2}", None),  # cut before its closing brace
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert A.last_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("we get 3 apples, then 1,234.5 in total", "1,234.5"),
        ("ratio -7/8", "-7/8"),
        ("it rose by 50%.", "50%"),
        ("version v2 of .5", ".5"),
        ("none", None),
    ],
)
def test_last_number(text, expected):
    assert A.last_number(text) == expected


@pytest.mark.parametrize(
    "text, value",
    [
        ("1,234", 1234.0),
        ("3/4", 0.75),
        ("50%", 0.5),
        (r"50\%", 0.5),
        (r"\frac{1}{2}", 0.5),
        ("$-2$", -2.0),
        (r"\text{7}", 7.0),
        ("1e3", 1000.0),
        ("abc", None),
        ("1/0", None),
        ("inf", None),
    ],
)
def test_to_number(text, value):
    assert A.to_number(text) == value


# (task, response, reference, correct?)
HAND_MADE = [
    ("exact", r"The answer is \boxed{B}.", "B", True),
    ("exact", "Thinking...\nThe answer is (C).", "C", True),
    ("exact", "Answer: Paris.", "paris", True),
    ("exact", "Paris", "Lyon", False),
    ("exact", "", "B", False),
    ("numeric", "so the total is 12 dollars", "12", True),
    ("numeric", "so about 0.5 in total", "1/2", True),
    ("numeric", r"\boxed{\frac{1}{2}} although 3 was close", "0.5", True),  # the box wins over the last number
    ("numeric", "it costs 1,000 dollars", "1000", True),
    ("numeric", "0.333", "1/3", False),  # beyond the default tolerance
    ("numeric", "0.33333333", "1/3", True),  # within it (rel 1e-6)
    ("numeric", "no numbers", "4", False),
    ("math", r"So \boxed{0.5}.", "1/2", True),
    ("math", r"The answer is $\frac{1}{2}$", "0.5", True),
    ("math", r"\boxed{\frac12}", r"\frac{1}{2}", True),
    ("math", r"$\frac{\sqrt2}{2}$", r"\sqrt{2}/2", True),
    ("math", r"\boxed{1+x}", "x+1", True),
    ("math", r"\boxed{\{2, 1\}}", r"\{1,2\}", True),
    ("math", "I think it is 3", "4", False),
    ("math", "I cannot tell", "4", False),
]


@pytest.mark.parametrize("task, response, reference, correct", HAND_MADE)
def test_hand_made_set(task, response, reference, correct):
    assert A.is_correct(task, response, reference) is correct


def test_numeric_tolerance_is_a_parameter():
    assert A.is_correct("numeric", "0.333", "1/3", rel_tol=1e-2)


@given(st.fractions(min_value=-1000, max_value=1000, max_denominator=50))
def test_a_fraction_matches_its_decimal_in_numeric_and_math(q):
    ref = f"{q.numerator}/{q.denominator}"
    assert A.is_correct("numeric", f"answer: {float(q)!r}", ref)


def test_math_works_in_a_worker_thread():
    """Math-Verify's timeout uses SIGALRM (main thread only); a Prefect task runs in a thread."""
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(A.is_correct("math", r"\boxed{0.5}", "1/2")))
    t.start()
    t.join()
    assert out == [True]


@pytest.mark.parametrize(
    "task, reference, why",
    [
        ("numeric", "about four", "not a number"),
        ("math", "$$", "cannot parse"),
        ("exact", "  ", "empty"),
        ("algebra", "1", "unknown task"),
    ],
)
def test_reference_errors(task, reference, why):
    assert why in A.reference_error(task, reference)


def test_load_verifiable_checks_every_reference_before_model_work(tmp_path):
    f = tmp_path / "v.jsonl"
    f.write_text(
        '{"prompt": "1+1?", "answer": 2}\n\n{"id": "q2", "prompt": "half?", "answer": "1/2"}\n'
        '{"prompt": "x?", "answer": "a lot"}\n'
    )
    with pytest.raises(DataError, match=r"v.jsonl:4: field 'answer': not a number"):
        load_verifiable(f, "numeric")
    rows = load_verifiable(f, "exact", limit=2)
    assert [(r.id, r.answer, r.line) for r in rows] == [("line-1", "2", 1), ("q2", "1/2", 3)]
    f.write_text('{"prompt": "1+1?"}\n')
    with pytest.raises(DataError, match=r":1: field 'answer': missing"):
        load_verifiable(f, "math")


def test_score_verifiable_accuracy_and_delta():
    from dr_core.datasets import VerifiableRow

    rows = [VerifiableRow("1", "q", "1/2"), VerifiableRow("2", "q", "3")]
    m, recs = score_verifiable(
        rows,
        "math",
        {"policy": [Answer(r"\boxed{0.5}", 5), Answer("no idea", 2)], "baseline": [Answer("2"), Answer("3")]},
    )
    assert m["policy_accuracy"] == 0.5 and m["baseline_accuracy"] == 0.5 and m["accuracy_delta"] == 0
    assert m["policy_no_answer"] == 1 and recs[0]["policy_correct"] and not recs[0]["baseline_correct"]
