-- monitor_length: response-length drift, the first sign of a reward that pays for length (dr_core/report/monitors.py).
-- grain: one row per (run_id, round) with measured sets (samples, stage 'measure').
-- Length is characters (every sample has its text; token counts are not kept for every stage). P(0)'s length is
-- round 0's measured sets when the run measured round 0, else round 1's stage 'generator' sets, which round 1
-- samples from P(0) before any update; NULL without either. ratio = mean_chars / p0_chars.
-- Columns: run_id, round, n_responses, mean_chars, p0_chars, ratio.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH lens AS (
    SELECT run_id, round, stage, count(*) AS n_responses, avg(length(response)) AS mean_chars
    FROM samples
    WHERE ($run_id IS NULL OR run_id = $run_id) AND stage IN ('measure', 'generator')
    GROUP BY ALL
),
base AS (
    SELECT run_id,
           coalesce(max(mean_chars) FILTER (WHERE round = 0 AND stage = 'measure'),
                    max(mean_chars) FILTER (WHERE round = 1 AND stage = 'generator')) AS p0_chars
    FROM lens
    GROUP BY run_id
)
SELECT l.run_id, l.round, l.n_responses, l.mean_chars, b.p0_chars, l.mean_chars / nullif(b.p0_chars, 0) AS ratio
FROM lens AS l
JOIN base AS b USING (run_id)
WHERE l.stage = 'measure'
ORDER BY l.run_id, l.round
