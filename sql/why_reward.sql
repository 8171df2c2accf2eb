-- why_reward: why one reward-service request got its reward: the rubric item by item, the verifier's verdict on
-- that response for each, and the Eq. 12 score each rubric rollout gave it (``dr serve``, stage 'service').
-- grain: one row per (response, rubric rollout, rubric item) of the set the request $request_id was scored in; a
-- /v1/rewards or /get_reward request is one response (response_idx), a /v1/score-set request every response of
-- its set. A rollout with no usable rubric is one row with item NULL and its error. verdict NULL = the verifier
-- could not answer; score NULL = unscorable under that rollout; reward is what the request was answered (the mean
-- score over rollouts; NULL = unscorable, and for a whole-set request NULL: see the score of each response).
-- Columns: request_id, route, group_id, set_id, received_at, reward, prompt, response_idx, response, rollout,
-- generator_ckpt, item, criterion, weight, error, verdict, verifier, score.
-- param request_id VARCHAR: the request id the service answered (its answer carries it)
-- param run_id VARCHAR = service: the service's run id (dr serve --run-id)
WITH req AS (
    SELECT request_id, route, group_id, set_id, received_at, reward, prompt, response_idx
    FROM requests
    WHERE run_id = $run_id AND stage = 'service' AND request_id = $request_id
),
resp AS (
    SELECT s.set_id, s.response_idx, s.response
    FROM samples s JOIN req USING (set_id)
    WHERE s.run_id = $run_id AND s.stage = 'service'
      AND (req.response_idx IS NULL OR s.response_idx = req.response_idx)
),
rub AS (
    SELECT set_id, rollout, generator_ckpt, item, criterion, weight, error
    FROM rubrics
    WHERE run_id = $run_id AND stage = 'service' AND set_id IN (SELECT set_id FROM req)
),
ver AS (
    SELECT set_id, rollout, item, response, verdict, verifier
    FROM verdicts
    WHERE run_id = $run_id AND stage = 'service' AND target = 'C' AND set_id IN (SELECT set_id FROM req)
),
sco AS (
    SELECT set_id, rollout, response, score
    FROM scores
    WHERE run_id = $run_id AND stage = 'service' AND target = 'C' AND set_id IN (SELECT set_id FROM req)
)
SELECT req.request_id, req.route, req.group_id, req.set_id, req.received_at, req.reward, req.prompt,
       resp.response_idx, resp.response, rub.rollout, rub.generator_ckpt, rub.item, rub.criterion, rub.weight,
       rub.error, ver.verdict, ver.verifier, sco.score
FROM req
JOIN resp USING (set_id)
JOIN rub USING (set_id)
LEFT JOIN ver ON ver.set_id = rub.set_id AND ver.rollout = rub.rollout AND ver.item = rub.item
             AND ver.response = resp.response_idx
LEFT JOIN sco ON sco.set_id = rub.set_id AND sco.rollout = rub.rollout AND sco.response = resp.response_idx
ORDER BY resp.response_idx, rub.rollout, rub.item
