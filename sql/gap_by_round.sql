-- gap_by_round: the relative score gap (paper Eq. 2) on the ranked anchor lists and the mean rewards, round by round.
-- grain: one row per (run_id, round, stage).
-- Eq. 2 with P uniform over ordered pairs: for one anchor list scored by one rubric rollout, gap = mean over
-- pairs i < j (reference order, rank 1 = best) of S_i - S_j, S the Eq. 12 score. A response with any missing
-- verdict is unscorable and drops out of its pairs; a list with fewer than 2 scored responses has gap NULL and
-- is counted in n_lists but not in n_scored_lists (as dr_core.scoring.equations.mean_ordered_gap). The mean over pairs is
-- computed in closed form: among the n scored responses in rank order, the k-th enters n - 2k + 1 pairs net.
-- The rewards of rubric rollouts (n_rollouts, mean R_disc and R_anchor, n_unscorable_rewards) leave out the policy
-- update's rows: they number its completions, with Eq. 21 advantages and no R_disc / R_anchor (training_signal).
-- Columns: run_id, round, stage, n_lists, n_scored_lists, mean_gap, n_rollouts, mean_r_disc, mean_r_anchor,
-- n_unscorable_rewards.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH items AS (
    SELECT run_id, round, stage, set_id, rollout, item, weight,
           count(*) OVER (PARTITION BY run_id, round, stage, set_id, rollout) AS n_items
    FROM rubrics
    WHERE item IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id)
),
scored AS (
    SELECT v.run_id, v.round, v.stage, v.set_id, v.rollout, v.response,
           CASE WHEN count(v.verdict) = any_value(i.n_items)
                THEN sum(i.weight * v.verdict::INTEGER) / sum(i.weight) END AS score
    FROM verdicts AS v
    JOIN items AS i USING (run_id, round, stage, set_id, rollout, item)
    WHERE v.target = 'anchor' AND ($run_id IS NULL OR v.run_id = $run_id)
    GROUP BY ALL
),
ranked AS (
    SELECT *,
           count(score) OVER list AS n,
           count(score) OVER (list ORDER BY response ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS k
    FROM scored
    WINDOW list AS (PARTITION BY run_id, round, stage, set_id, rollout)
),
lists AS (
    SELECT run_id, round, stage, set_id, rollout,
           CASE WHEN max(n) >= 2 THEN sum(score * (n - 2 * k + 1)) / (max(n) * (max(n) - 1) / 2.0) END AS gap
    FROM ranked
    GROUP BY ALL
),
gaps AS (
    SELECT run_id, round, stage, count(*) AS n_lists, count(gap) AS n_scored_lists, avg(gap) AS mean_gap
    FROM lists
    GROUP BY ALL
),
rew AS (
    SELECT run_id, round, stage, count(*) AS n_rollouts, avg(r_disc) AS mean_r_disc, avg(r_anchor) AS mean_r_anchor,
           count(*) FILTER (WHERE r_disc IS NULL OR r_anchor IS NULL) AS n_unscorable_rewards
    FROM rewards
    WHERE stage <> 'policy' AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY ALL
)
SELECT run_id, round, stage,
       coalesce(n_lists, 0) AS n_lists, coalesce(n_scored_lists, 0) AS n_scored_lists, mean_gap,
       coalesce(n_rollouts, 0) AS n_rollouts, mean_r_disc, mean_r_anchor,
       coalesce(n_unscorable_rewards, 0) AS n_unscorable_rewards
FROM gaps FULL JOIN rew USING (run_id, round, stage)
ORDER BY run_id, round, stage
