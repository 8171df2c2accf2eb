-- set_gap: how far apart the evaluator's scores are within the policy's own response sets C, round by round.
-- grain: one row per (run_id, round, stage).
-- Eq. 2 needs a reference order of the pair (y+, y-); C has none (its K responses are unranked samples of the
-- policy), so on C this query measures the gap the evaluator *exposes*: for one set scored by one rubric rollout,
-- spread = mean over pairs i < j of |S_i - S_j| (S the stored Eq. 12 score of target 'C'). It is an upper bound on
-- |Eq. 2| for any reference order and equals Eq. 2 when the reference agrees with the scores. A spread of 0 means the
-- rubric gives every response of the set the same score: no optimization signal (section 3.1). Unscorable (NULL)
-- scores drop out of their pairs; a list with fewer than 2 scored responses has spread NULL and is counted in
-- n_lists but not n_scored_lists. Closed form over the n scored responses sorted ascending: the k-th enters
-- 2k - n - 1 pairs net.
-- Columns: run_id, round, stage, n_lists, n_scored_lists, mean_spread, n_zero_spread, zero_spread_share.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH ranked AS (
    SELECT run_id, round, stage, set_id, rollout, score,
           count(score) OVER list AS n,
           row_number() OVER (list ORDER BY score NULLS LAST) AS k
    FROM scores
    WHERE target = 'C' AND ($run_id IS NULL OR run_id = $run_id)
    WINDOW list AS (PARTITION BY run_id, round, stage, set_id, rollout)
),
lists AS (
    SELECT run_id, round, stage, set_id, rollout,
           CASE WHEN max(n) >= 2 THEN sum(score * (2 * k - n - 1)) / (max(n) * (max(n) - 1) / 2.0) END AS spread
    FROM ranked
    GROUP BY ALL
)
SELECT run_id, round, stage,
       count(*) AS n_lists,
       count(spread) AS n_scored_lists,
       avg(spread) AS mean_spread,
       count(*) FILTER (WHERE spread = 0) AS n_zero_spread,
       count(*) FILTER (WHERE spread = 0) / nullif(count(spread), 0) AS zero_spread_share
FROM lists
GROUP BY ALL
ORDER BY run_id, round, stage
