-- monitor_kl: the KL of each GRPO update to its reference model, step by step (dr_core/report/monitors.py).
-- grain: one row per (run_id, round, role, step) of a registered checkpoint whose metrics_json has kl_by_step.
-- kl is TRL's logged per-token KL estimate at that step (GRPOConfig beta > 0; with beta = 0 TRL computes none and
-- the update registers no kl_by_step, so there are no rows).
-- Columns: run_id, round, role, step, kl.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH steps AS (
    SELECT run_id, round, role,
           unnest(json_transform(json_extract(metrics_json, '$.kl_by_step'), '[{"step": "INTEGER", "kl": "DOUBLE"}]'))
               AS s
    FROM checkpoints
    WHERE ($run_id IS NULL OR run_id = $run_id) AND json_extract(metrics_json, '$.kl_by_step') IS NOT NULL
)
SELECT run_id, round, role, s.step AS step, s.kl AS kl
FROM steps
ORDER BY run_id, round, role, step
