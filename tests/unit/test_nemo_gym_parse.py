"""NeMo Gym's /verify body as the service reads it (``requests.NeMoGymVerifyRequest``): the prompt from the Responses
API input, the answer from the output items, the group key, the extra fields accepted and echoed, a bad body refused
naming the field; the answer (``answers.verify_answer``) with the set's mean for an unscorable rollout; and the
collector's ``holds`` that lets a retried rollout wait on its group. Pure: no server, no nemo-gym (its own models are
used in tests/integration/test_nemo_gym_verify.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest

from dr_core.config.service import ServiceSettings
from dr_core.service.answers import unscorable_count, verify_answer
from dr_core.service.errors import BadRequest
from dr_core.service.groups import GroupCollector
from dr_core.service.ledger import prompt_id
from dr_core.service.requests import NeMoGymSeedSessionRequest, NeMoGymVerifyRequest, parse
from dr_core.service.scoring import Member


def _message(text: str, role: str = "assistant", **extra) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
        **extra,
    }


def _body(prompt="What is 2+2?", answer="4", **extra) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": prompt, "type": "message"}], "model": "m"},
        "response": {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [_message(answer)],
        },
        **extra,
    }


def _parse(body) -> NeMoGymVerifyRequest:
    return parse(NeMoGymVerifyRequest, json.dumps(body).encode(), ServiceSettings())


def test_one_user_message_is_the_prompt_and_output_text_the_answer():
    b = _parse(_body("What is 2+2?", "It is 4."))
    assert b.prompt_text() == "What is 2+2?"
    assert b.response_text() == "It is 4."


def test_a_string_input_is_the_prompt():
    body = _body()
    body["responses_create_params"]["input"] = "Name a prime."
    assert _parse(body).prompt_text() == "Name a prime."


def test_instructions_and_several_turns_are_role_blocks_and_non_text_is_left_out():
    body = _body()
    body["responses_create_params"]["instructions"] = "Be brief."
    body["responses_create_params"]["input"] = [
        {"role": "system", "content": [{"type": "input_text", "text": "You are a tutor."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}, {"type": "input_image", "image_url": "x"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "42"},
        _message("Hello."),
        {"role": "user", "content": "Now 2+2?"},
    ]
    assert _parse(body).prompt_text() == (
        "system: Be brief.\n\nsystem: You are a tutor.\n\nuser: Hi\n\nassistant: Hello.\n\nuser: Now 2+2?"
    )


def test_the_answer_is_the_assistant_output_text_without_reasoning_tool_calls_or_refusals():
    body = _body()
    body["response"]["output"] = [
        {"id": "rs", "type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking..."}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Four", "annotations": []},
                {"type": "refusal", "refusal": "no"},
                {"type": "output_text", "text": ".", "annotations": []},
            ],
            # NeMo Gym's ...ForTraining items carry token ids and log-probabilities: accepted
            "prompt_token_ids": [1, 2],
            "generation_token_ids": [3],
            "generation_log_probs": [-0.1],
        },
    ]
    assert _parse(body).response_text() == "Four."


def test_an_output_without_text_is_the_empty_answer_not_an_error():
    body = _body()
    body["response"]["output"] = [{"id": "rs", "type": "reasoning", "summary": []}]
    assert _parse(body).response_text() == ""


def test_the_group_key_is_the_prompt_scoped_by_task_index_else_prompt_id():
    pid = prompt_id("What is 2+2?")
    assert _parse(_body()).group_key(pid) == pid
    assert _parse(_body(_ng_task_index=7, _ng_rollout_index=3)).group_key(pid) == f"t7-{pid}"
    by_row = _parse(_body(prompt_id="row-12")).group_key(pid)
    assert by_row.startswith("i") and by_row.endswith(pid) and by_row != pid
    assert _parse(_body(prompt_id=12)).group_key(pid) != by_row  # an int id and a string id of the same digits differ
    assert _parse(_body("Another prompt")).group_key(prompt_id("Another prompt")) != pid


def test_extra_fields_are_accepted_and_echoed_with_aliases_as_sent():
    body = _body(_ng_task_index=0, _ng_rollout_index=1, expected_answer="4", verifier_metadata={"k": [1]})
    body["responses_create_params"]["temperature"] = 0.7
    body["response"]["usage"] = {"input_tokens": 3}
    echo = _parse(body).echo()
    assert echo == body


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda b: b.pop("response"), "response"),
        (lambda b: b.pop("responses_create_params"), "responses_create_params"),
        (lambda b: b["responses_create_params"].update(input=3), "responses_create_params.input"),
        (lambda b: b["response"].update(output="text"), "response.output"),
        (lambda b: b.update(_ng_task_index="seven"), "_ng_task_index"),
        (lambda b: b["responses_create_params"].update(input=[{"role": "user", "content": " "}]), None),
        (lambda b: b["responses_create_params"].update(input=""), None),
    ],
)
def test_a_bad_body_is_refused_naming_the_field(mutate, field):
    body = _body()
    mutate(body)
    with pytest.raises(BadRequest) as err:
        _parse(body)
    assert err.value.status == 422
    assert err.value.field == (field or "responses_create_params.input")


def test_text_limits_name_the_field():
    s = ServiceSettings(max_text_chars=10)
    with pytest.raises(BadRequest, match="response.output"):
        parse(NeMoGymVerifyRequest, json.dumps(_body("short", "x" * 11)).encode(), s)
    with pytest.raises(BadRequest, match="responses_create_params.input"):
        parse(NeMoGymVerifyRequest, json.dumps(_body("y" * 11, "ok")).encode(), s)


def test_seed_session_accepts_any_object_and_refuses_anything_else():
    assert parse(NeMoGymSeedSessionRequest, json.dumps(_body()).encode(), ServiceSettings()) is not None
    with pytest.raises(BadRequest, match="body"):
        parse(NeMoGymSeedSessionRequest, b"[1]", ServiceSettings())


def _member_answer(rid: str, reward, set_id: int = 5) -> dict:
    why = [] if reward is not None else ["rollout 0: response 1 unscorable"]
    return {
        "request_id": rid,
        "group_id": "g",
        "reward": reward,
        "rubric_id": f"service:{set_id}",
        "set_id": set_id,
        "unscorable": why,
    }


def test_the_answer_echoes_the_request_with_the_reward_and_fills_an_unscorable_one_with_the_set_mean():
    answers = {"a": _member_answer("a", 0.25), "b": _member_answer("b", None), "c": _member_answer("c", 0.75)}
    answers["x"] = _member_answer("x", 1.0, set_id=6)  # another set of the same batch: not a mate
    request = {"responses_create_params": {"input": "p"}, "response": {"output": []}, "row": 1, "reward": "old"}
    a = verify_answer(request, answers, "a")
    assert a == {**request, **answers["a"], "reward": 0.25}
    b = verify_answer(request, answers, "b")
    assert b["reward"] == 0.5 and b["unscorable"] and b["request_id"] == "b"
    assert unscorable_count(a) == 0 and unscorable_count(b) == 1 and unscorable_count({}) == 0
    none = {"a": _member_answer("a", None), "b": _member_answer("b", None)}
    assert verify_answer(request, none, "a")["reward"] == 0.0


def test_holds_sees_open_and_closing_members_only():
    async def run():
        done = []
        c = GroupCollector(done.append, timeout_s=5, max_open=4)
        m = Member("r1", "verify", "fp1", datetime.now(timezone.utc), group_id="g")
        c.join("g", 2, "p", "x", m)
        assert c.holds("g", "r1") and not c.holds("g", "r2") and not c.holds("h", "r1")
        c.join("g", 2, "p", "y", Member("r2", "verify", "fp2", datetime.now(timezone.utc), group_id="g"))
        assert done and "g" not in c.open and c.holds("g", "r2")  # complete, being scored
        done[0].future.set_result({})
        await asyncio.sleep(0)
        assert not c.holds("g", "r1")

    asyncio.run(run())
