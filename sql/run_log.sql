-- run_log: the runs table's records of one run in time order, with the time since the previous record.
-- grain: one row per runs row (one per finished round of a flow; a re-run replaces its round's row).
-- seconds_since_previous approximates a round's wall time when the records come from one uninterrupted run; it is
-- NULL for the first record. Each flow step's own wall time: sql/step_times.
-- Columns: run_id, created_at, status, code_version, seconds_since_previous.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
SELECT run_id, created_at, status, code_version,
       epoch(created_at - lag(created_at) OVER (PARTITION BY run_id ORDER BY created_at)) AS seconds_since_previous
FROM runs
WHERE $run_id IS NULL OR run_id = $run_id
ORDER BY run_id, created_at
