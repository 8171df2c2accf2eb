"""Helpers shared by the tests' fake engines: reading a verifier request back (dr_core.rubric.prompts.verifier_messages)."""

from __future__ import annotations


def verifier_check(user: str) -> tuple[str, str]:
    """(criterion, response) of a verifier request's user message, in either prompt style ("system":
    VERIFIER_PREFIX_TEMPLATE then VERIFIER_CRITERION_TEMPLATE; "plain": the VERIFIER_PLAIN_* templates)."""
    if "[Criterion]\n" in user:
        criterion = user.split("[Criterion]\n")[1].split("\n")[0]
        response = user.split("[Response]\n")[1].split("\n\n[Criterion]")[0]
        return criterion, response
    criterion = user.split("Criterion: ")[1].split("\n")[0]
    response = user.split("[RESPONSE]\n")[1].split("\n[END RESPONSE]")[0]
    return criterion, response
