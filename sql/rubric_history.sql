-- rubric_history: the rubrics written for one prompt across rounds, with each item's yes-rate.
-- grain: one row per rubric item (run_id, round, stage, set_id, rollout, item) of the sets sampled for $prompt_id.
-- yes_rate_c is the share of yes over the policy set C, yes_rate_anchor over the ranked anchor list; both ignore
-- unscorable (NULL) verdicts, which are counted in n_unscorable. Rollouts that produced no usable rubric are not
-- listed (their rubric row has item NULL; see the error column of the rubrics table).
-- Columns: run_id, round, stage, set_id, rollout, item, generator_ckpt, criterion, weight, yes_rate_c,
-- yes_rate_anchor, n_verdicts, n_unscorable.
-- param prompt_id VARCHAR: the prompt (samples.prompt_id)
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH sets AS (
    SELECT DISTINCT run_id, round, stage, set_id
    FROM samples
    WHERE prompt_id = $prompt_id AND ($run_id IS NULL OR run_id = $run_id)
),
rates AS (
    SELECT v.run_id, v.round, v.stage, v.set_id, v.rollout, v.item,
           avg(v.verdict::INTEGER) FILTER (WHERE v.target = 'C') AS yes_rate_c,
           avg(v.verdict::INTEGER) FILTER (WHERE v.target = 'anchor') AS yes_rate_anchor,
           count(*) AS n_verdicts,
           count(*) - count(v.verdict) AS n_unscorable
    FROM verdicts AS v
    JOIN sets USING (run_id, round, stage, set_id)
    GROUP BY ALL
)
SELECT r.run_id, r.round, r.stage, r.set_id, r.rollout, r.item, r.generator_ckpt, r.criterion, r.weight,
       rates.yes_rate_c, rates.yes_rate_anchor,
       coalesce(rates.n_verdicts, 0) AS n_verdicts, coalesce(rates.n_unscorable, 0) AS n_unscorable
FROM rubrics AS r
JOIN sets USING (run_id, round, stage, set_id)
LEFT JOIN rates USING (run_id, round, stage, set_id, rollout, item)
WHERE r.item IS NOT NULL
ORDER BY r.run_id, r.round, r.stage, r.set_id, r.rollout, r.item
