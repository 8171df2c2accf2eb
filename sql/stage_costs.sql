-- stage_costs: what each stage of each round produced and cost, from what the store holds.
-- grain: one row per (run_id, round, stage) that wrote samples, rubrics or verdicts, or registered a checkpoint.
-- Tokens are the policy's sampled sets (samples.prompt_tokens counts one prompt once per set; response_tokens every
-- response); rows written by the policy update carry NULL token counts and show as NULL sums. Work counts: rubric
-- rollouts (usable or not), rubric items, verdicts (unscorable among them) and the verifier's yes-rate over the known
-- verdicts (1.0 = it said yes to everything, so every score ties). Training seconds and steps come from the
-- checkpoint of the update whose role equals the stage (generator | policy; checkpoints.metrics_json). Per-step wall
-- times of the flows: sql/step_times.
-- Columns: run_id, round, stage, n_sets, n_responses, prompt_tokens, response_tokens, n_rubric_rollouts,
-- n_rubric_failures, n_rubric_items, n_verdicts, n_unscorable_verdicts, yes_rate, train_steps, train_seconds.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH s AS (
    SELECT run_id, round, stage, count(DISTINCT set_id) AS n_sets, count(*) AS n_responses,
           sum(prompt_tokens) FILTER (WHERE response_idx = 0)::BIGINT AS prompt_tokens,
           sum(response_tokens)::BIGINT AS response_tokens
    FROM samples
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY ALL
),
r AS (
    SELECT run_id, round, stage, count(DISTINCT (set_id, rollout)) AS n_rubric_rollouts,
           count(*) FILTER (WHERE item IS NULL) AS n_rubric_failures, count(item) AS n_rubric_items
    FROM rubrics
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY ALL
),
v AS (
    SELECT run_id, round, stage, count(*) AS n_verdicts, count(*) - count(verdict) AS n_unscorable_verdicts,
           avg(verdict::INTEGER) AS yes_rate
    FROM verdicts
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY ALL
),
t AS (
    SELECT run_id, round, role AS stage, max(json_extract(metrics_json, '$.steps')::INTEGER) AS train_steps,
           max(json_extract(metrics_json, '$.seconds')::DOUBLE) AS train_seconds
    FROM checkpoints
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY ALL
)
SELECT run_id, round, stage,
       coalesce(s.n_sets, 0) AS n_sets, coalesce(s.n_responses, 0) AS n_responses, s.prompt_tokens, s.response_tokens,
       coalesce(r.n_rubric_rollouts, 0) AS n_rubric_rollouts, coalesce(r.n_rubric_failures, 0) AS n_rubric_failures,
       coalesce(r.n_rubric_items, 0) AS n_rubric_items, coalesce(v.n_verdicts, 0) AS n_verdicts,
       coalesce(v.n_unscorable_verdicts, 0) AS n_unscorable_verdicts, v.yes_rate, t.train_steps, t.train_seconds
FROM s
FULL JOIN r USING (run_id, round, stage)
FULL JOIN v USING (run_id, round, stage)
FULL JOIN t USING (run_id, round, stage)
ORDER BY run_id, round, stage
