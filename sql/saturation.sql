-- saturation: rubric items that every response of a policy set answers the same way (all yes or all no), per round.
-- grain: one row per (run_id, round, stage).
-- An item is (set_id, rollout, item) judged over the responses of the set C (target = 'C'). It counts as judged
-- only when every one of its verdicts is known and there are at least 2; an item with a missing verdict cannot
-- be called saturated and is counted in n_incomplete instead. A saturated item carries no R_disc signal (Eq. 13).
-- Columns: run_id, round, stage, n_items, n_judged, n_incomplete, n_all_yes, n_all_no, n_saturated, saturation.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH items AS (
    SELECT run_id, round, stage, set_id, rollout, item,
           count(*) AS n, count(verdict) AS n_known,
           bool_and(verdict) AS all_yes, NOT bool_or(verdict) AS all_no
    FROM verdicts
    WHERE target = 'C' AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY ALL
),
judged AS (
    SELECT *, n_known = n AND n >= 2 AS is_judged FROM items
)
SELECT run_id, round, stage,
       count(*) AS n_items,
       count(*) FILTER (WHERE is_judged) AS n_judged,
       count(*) FILTER (WHERE n_known < n) AS n_incomplete,
       count(*) FILTER (WHERE is_judged AND all_yes) AS n_all_yes,
       count(*) FILTER (WHERE is_judged AND all_no) AS n_all_no,
       count(*) FILTER (WHERE is_judged AND (all_yes OR all_no)) AS n_saturated,
       count(*) FILTER (WHERE is_judged AND (all_yes OR all_no)) / nullif(count(*) FILTER (WHERE is_judged), 0)
           AS saturation
FROM judged
GROUP BY ALL
ORDER BY run_id, round, stage
