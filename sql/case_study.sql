-- case_study: rubric, verdict matrix and scores for a few response sets of one round (the paper's appendix H view).
-- grain: one row per (set_id, rubric item, target response) of the first $n_sets sets (by set_id) of
-- ($run_id, $round, $stage), for rubric rollout $rollout; a rollout with no usable rubric is one row with item NULL
-- and its error. verdict NULL = the verifier could not answer; score is the stored Eq. 12 score of that response
-- (NULL = unscorable). text is the response: from samples for target 'C' (response = index in the set), from
-- anchors for target 'anchor' (response = rank, 1 = best).
-- Columns: set_id, prompt_id, prompt, rollout, generator_ckpt, item, criterion, weight, error, target, response,
-- verdict, score, text.
-- param run_id VARCHAR: the run
-- param round INTEGER: the round
-- param stage VARCHAR = measure: the stage (measure, generator, stale, fresh...)
-- param rollout INTEGER = 0: which rubric rollout of each set
-- param n_sets INTEGER = 3: how many sets (the lowest set ids)
WITH sets AS (
    SELECT set_id, prompt_id
    FROM (SELECT DISTINCT set_id, prompt_id FROM samples
          WHERE run_id = $run_id AND round = $round AND stage = $stage)
    QUALIFY row_number() OVER (ORDER BY set_id) <= $n_sets
),
rub AS (
    SELECT set_id, rollout, generator_ckpt, item, criterion, weight, error
    FROM rubrics
    WHERE run_id = $run_id AND round = $round AND stage = $stage AND rollout = $rollout
),
ver AS (
    SELECT set_id, rollout, item, target, response, verdict
    FROM verdicts
    WHERE run_id = $run_id AND round = $round AND stage = $stage AND rollout = $rollout
),
sco AS (
    SELECT set_id, rollout, target, response, score
    FROM scores
    WHERE run_id = $run_id AND round = $round AND stage = $stage AND rollout = $rollout
),
c_text AS (
    SELECT set_id, 'C' AS target, response_idx AS response, response AS text
    FROM samples
    WHERE run_id = $run_id AND round = $round AND stage = $stage
),
a_text AS (
    SELECT prompt_id, 'anchor' AS target, rank AS response, any_value(response) AS text
    FROM anchors
    GROUP BY ALL
),
p_text AS (
    SELECT prompt_id, any_value(prompt) AS prompt FROM prompts GROUP BY ALL
)
SELECT sets.set_id, sets.prompt_id, p_text.prompt, rub.rollout, rub.generator_ckpt, rub.item, rub.criterion,
       rub.weight, rub.error, ver.target, ver.response, ver.verdict, sco.score, coalesce(c_text.text, a_text.text) AS text
FROM sets
JOIN rub USING (set_id)
LEFT JOIN ver ON ver.set_id = rub.set_id AND ver.rollout = rub.rollout AND ver.item = rub.item
LEFT JOIN sco ON sco.set_id = ver.set_id AND sco.rollout = ver.rollout AND sco.target = ver.target
             AND sco.response = ver.response
LEFT JOIN c_text ON c_text.set_id = ver.set_id AND c_text.target = ver.target AND c_text.response = ver.response
LEFT JOIN a_text ON a_text.prompt_id = sets.prompt_id AND a_text.target = ver.target AND a_text.response = ver.response
LEFT JOIN p_text ON p_text.prompt_id = sets.prompt_id
ORDER BY sets.set_id, rub.item, ver.target, ver.response
