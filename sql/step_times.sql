-- step_times: every flow step of every execution (one Prefect flow run of `dr round`, `dr coevolve`,
-- `dr stale-fresh` or a deployment) of a run: whether it ran (Completed), came from the cache (Cached) or failed
-- (Failed, Crashed, TimedOut), was running when its process died (Running: the row is written when a step starts;
-- Interrupted: the next execution of the run found it so), when it started and its wall seconds (NULL while Running
-- or Interrupted), with its execution's totals alongside.
-- grain: one row per (run_id, execution, step). A coevolve execution spans rounds; `round` is the round the step was
-- recorded under (steps before the first round, such as select-inputs, go with the first round the flow recorded).
-- Columns: run_id, round, execution, flow, step, state, started_at, seconds, peak_rss_mb (the flow process's peak
-- resident memory during the step, MB; NULL for rows written before it was recorded), execution_started_at,
-- execution_seconds (sum of its steps' seconds), execution_peak_rss_mb (its highest step peak), execution_steps,
-- execution_ran (Completed), execution_cached (Cached), execution_interrupted (Running or Interrupted),
-- execution_failed (any other state).
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
SELECT run_id, round, execution, flow, step, state, started_at, seconds, peak_rss_mb,
       min(started_at) OVER e AS execution_started_at,
       round(sum(seconds) OVER e, 2) AS execution_seconds,
       max(peak_rss_mb) OVER e AS execution_peak_rss_mb,
       count(*) OVER e AS execution_steps,
       count(*) FILTER (WHERE state = 'Completed') OVER e AS execution_ran,
       count(*) FILTER (WHERE state = 'Cached') OVER e AS execution_cached,
       count(*) FILTER (WHERE state IN ('Running', 'Interrupted')) OVER e AS execution_interrupted,
       count(*) FILTER (WHERE state NOT IN ('Completed', 'Cached', 'Running', 'Interrupted')) OVER e AS execution_failed
-- steps files written before peak_rss_mb existed lack the column: the empty BY NAME union adds it (NULL) to them
FROM (SELECT * FROM steps UNION ALL BY NAME SELECT CAST(NULL AS DOUBLE) AS peak_rss_mb WHERE false)
WHERE $run_id IS NULL OR run_id = $run_id
WINDOW e AS (PARTITION BY run_id, execution)
ORDER BY run_id, execution_started_at, started_at, step
