-- monitor_reward_vs_eval: the policy's training reward beside its held-out figures, round by round
-- (dr_core/report/monitors.py): a reward that rises while the held-out accuracy and win rate do not is the reward
-- being gamed, not the task being learnt.
-- grain: one row per (run_id, round) with a policy update (scores of stage 'policy') or an evaluation row.
-- train_reward is the mean Eq. 12 score of the policy update's scored rollouts (scores, stage 'policy', target 'C';
-- NULL scores, unscorable, are left out); eval_accuracy the evaluator's held-out accuracy (eval metric 'accuracy'
-- of the round's measurement), win_rate P(t)'s win rate against P(0) (eval metric 'win_rate', benchmark
-- '<data>.vs-P0'), each averaged over its seeds; NULL where the round has none.
-- Columns: run_id, round, train_reward, n_scored, eval_accuracy, win_rate.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
WITH train AS (
    SELECT run_id, round, avg(score) AS train_reward, count(score) AS n_scored
    FROM scores
    WHERE ($run_id IS NULL OR run_id = $run_id) AND stage = 'policy' AND target = 'C'
    GROUP BY ALL
),
ev AS (
    SELECT run_id, round,
           avg(value) FILTER (WHERE metric = 'accuracy' AND NOT benchmark LIKE '%.vs-P0') AS eval_accuracy,
           avg(value) FILTER (WHERE metric = 'win_rate' AND benchmark LIKE '%.vs-P0') AS win_rate
    FROM eval
    WHERE ($run_id IS NULL OR run_id = $run_id)
    GROUP BY ALL
)
SELECT run_id, round, t.train_reward, t.n_scored, e.eval_accuracy, e.win_rate
FROM train AS t
FULL OUTER JOIN ev AS e USING (run_id, round)
ORDER BY run_id, round
