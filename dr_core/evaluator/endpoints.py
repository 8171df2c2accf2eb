"""What the endpoints of an engine did during one stage (verification, rubric generation), in the stage's cost.

An engine with several endpoints (``OpenAIHTTPEngine`` over a ``base_url`` list) balances its requests and fails
over when a replica dies (dr_core/engines/openai_http/transport.py). That must never be hidden from the run's
costs: a stage that lost a replica halfway is slower and sent some requests twice. So ``verify`` and
``generate_rubrics`` read the engine's ``endpoint_stats()`` before and after their call and add the difference to
their ``StageStats`` (``add_endpoints``; ``merge`` keeps it), whose ``as_dict`` adds to the stage's cost (what
tasks/round.py stores as the step's ``cost``):

- ``endpoints``: per endpoint URL, what this call added to its counters (``requests``, ``answered``, ``failures``,
  ``marked_down``, ``moved``) and ``down``, its state at the end;
- ``endpoints_down``: times an endpoint was marked down during the call; ``requests_moved``: requests that moved to
  another endpoint after a failure.

An engine without endpoints (in-process vLLM, a test fake) adds nothing. The counters are the engine's: a call that
shares its engine with another call running at the same time counts that one's requests too.

    python -c "from dr_core.evaluator.endpoints import endpoint_delta; print(endpoint_delta(
        {'u': {'requests': 2, 'down': False}}, {'u': {'requests': 5, 'down': True}}))"
"""

from __future__ import annotations


def endpoint_counts(engine) -> dict[str, dict] | None:
    """The engine's ``endpoint_stats()`` (per URL: counters and ``down``), or None for an engine without endpoints."""
    stats = getattr(engine, "endpoint_stats", None)
    counts = stats() if callable(stats) else None
    return counts if isinstance(counts, dict) else None


def endpoint_delta(before: dict[str, dict] | None, after: dict[str, dict] | None) -> dict[str, dict]:
    """Per endpoint: each counter's growth from ``before`` to ``after``; ``down`` (a state, not a counter) as it is
    ``after``. Empty when either reading is None."""
    if before is None or after is None:
        return {}
    out = {}
    for url, now in after.items():
        was = before.get(url, {})
        out[url] = {k: v if isinstance(v, bool) else v - was.get(k, 0) for k, v in now.items()}
    return out
