"""The HTTP engine's reading of OpenAI logprobs: the sampled token is counted once (it is usually also among the top
ones; counting it twice gave log-probabilities above 0)."""

import math

from dr_core.engines.openai_http.replies import top_logprobs as _top_logprobs


def test_sampled_token_is_not_counted_twice():
    choice = {
        "logprobs": {
            "content": [
                {
                    "token": ",",
                    "logprob": -0.44,
                    "top_logprobs": [{"token": ",", "logprob": -0.44}, {"token": ".", "logprob": -1.3}],
                },
                {"token": " rare", "logprob": -7.0, "top_logprobs": [{"token": " is", "logprob": -0.2}]},
            ]
        }
    }
    first, second = _top_logprobs(choice)
    assert first == {",": -0.44, ".": -1.3}
    assert second == {" is": -0.2, " rare": -7.0}  # a sampled token outside the top list is added
    assert all(lp <= 0 for pos in (first, second) for lp in pos.values())


def test_no_logprobs_gives_no_positions():
    assert _top_logprobs({}) == ()
    assert not math.isnan(sum(_top_logprobs({"logprobs": {"content": [{"token": "a", "logprob": -1.0}]}})[0].values()))
