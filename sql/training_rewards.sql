-- training_rewards: R_disc (Eq. 13) and R_anchor (Eq. 15) of the generator update's GRPO rollouts, step by step.
-- grain: one row per (run_id, round, step) of the rewards table's stage 'generator' rows.
-- The training records number a rollout step * G + i (dr_core/train/records.py), G the GRPO group size
-- (generator.num_generations), which the store does not hold as such: it is $group_size when given, else derived
-- per round from the round's generator checkpoint: the last step ends at rollout steps * G - 1, so
-- G = (max(rollout) + 1) / steps, steps = checkpoints.metrics_json $.steps. With neither (no checkpoint registered,
-- e.g. a crashed update), step is NULL and the round's rollouts form one row. global_step counts steps across
-- rounds (the steps seen in earlier rounds of the run come first). Unscorable rewards (NULL: the rubric could not be
-- used) are counted in n_unscorable and left out of the means.
-- Columns: run_id, round, step, global_step, group_size, n_rollouts, n_unscorable, mean_r_disc, mean_r_anchor,
-- mean_advantage.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
-- param group_size INTEGER = NULL: G, rollouts per prompt group (NULL: derive it from the checkpoint's steps)
WITH steps AS (
    SELECT run_id, round, max(json_extract(metrics_json, '$.steps')::INTEGER) AS n_steps
    FROM checkpoints
    WHERE role = 'generator' AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY ALL
),
sized AS (
    SELECT r.run_id, r.round, r.rollout, r.r_disc, r.r_anchor, r.advantage,
           coalesce($group_size,
                    CASE WHEN s.n_steps > 0 THEN (max(r.rollout) OVER (PARTITION BY r.run_id, r.round) + 1) // s.n_steps
                    END) AS group_size
    FROM rewards AS r
    LEFT JOIN steps AS s USING (run_id, round)
    WHERE r.stage = 'generator' AND ($run_id IS NULL OR r.run_id = $run_id)
),
per_step AS (
    SELECT run_id, round, rollout // nullif(group_size, 0) AS step, any_value(group_size) AS group_size,
           count(*) AS n_rollouts,
           count(*) FILTER (WHERE r_disc IS NULL OR r_anchor IS NULL) AS n_unscorable,
           avg(r_disc) AS mean_r_disc, avg(r_anchor) AS mean_r_anchor, avg(advantage) AS mean_advantage
    FROM sized
    GROUP BY ALL
),
rounds AS (
    SELECT run_id, round, coalesce(max(step) + 1, 1) AS n_seen
    FROM per_step
    GROUP BY ALL
),
offsets AS (
    SELECT run_id, round,
           coalesce(sum(n_seen) OVER (PARTITION BY run_id ORDER BY round ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    0)::BIGINT AS first_step
    FROM rounds
)
SELECT p.run_id, p.round, p.step, (o.first_step + p.step)::BIGINT AS global_step, p.group_size, p.n_rollouts, p.n_unscorable,
       p.mean_r_disc, p.mean_r_anchor, p.mean_advantage
FROM per_step AS p
JOIN offsets AS o USING (run_id, round)
ORDER BY p.run_id, p.round, p.step
