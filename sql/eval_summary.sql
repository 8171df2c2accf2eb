-- eval_summary: evaluation metrics averaged over seeds.
-- grain: one row per (run_id, round, benchmark, checkpoint, verifier, metric).
-- n_seeds counts every row, n_scored only those with a value: a metric that could not be computed is NULL in the
-- eval table, never 0, so it is left out of mean/std and shows up as n_seeds > n_scored.
-- Columns: run_id, round, benchmark, checkpoint, verifier, metric, n_seeds, n_scored, mean, std, min, max.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
-- param benchmark VARCHAR = NULL: only this benchmark (NULL: every benchmark)
SELECT run_id, round, benchmark, checkpoint, verifier, metric,
       count(*) AS n_seeds,
       count(value) AS n_scored,
       avg(value) AS mean,
       stddev_samp(value) AS std,
       min(value) AS min,
       max(value) AS max
FROM eval
WHERE ($run_id IS NULL OR run_id = $run_id) AND ($benchmark IS NULL OR benchmark = $benchmark)
GROUP BY ALL
ORDER BY run_id, round, benchmark, checkpoint, verifier, metric
