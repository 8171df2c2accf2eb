-- training_signal: did a GRPO step have a gradient? Per step of each update, the groups whose rewards do not vary.
-- grain: one row per (run_id, round, stage, step) of the rewards table's stage 'generator' and 'policy' rows.
-- A GRPO group is the rollouts of one prompt in one step. Rollouts are numbered rollout = step * G + i
-- (dr_core/train/records.py). Generator update: a group is (set_id, step); the reward is rewards.advantage,
-- A = A_disc + lam A_anchor (Eq. 24-25), which is what its reward function hands TRL; G is $group_size when given,
-- else the round's generator checkpoint's metrics_json $.group_size, else derived as in training_rewards
-- ((max(rollout) + 1) // $.steps); with none of them step is NULL and each set's rollouts form one group.
-- Policy update: a group is a set_id (one response set per step and prompt), G its row count; the reward is the
-- completion's Eq. 12 score (scores, target 'C', response = rollout % G). A group's reward std is the sample std
-- (ddof 1, as TRL's nanstd) of its non-NULL rewards, NULL with fewer than 2. Zero std: std < 1e-6 or NULL
-- (dr_core.scoring.signals.ZERO_STD): every advantage of the group is 0. zero_std_share = 1: the step had no gradient.
-- reward_std_mean: mean group std over the groups with a std.
-- The training reward curve: reward_mean is the mean reward of the step's scored rollouts (generator: R_disc +
-- $lam R_anchor, the reward before Eq. 24-25 turns it into advantages; policy: the Eq. 12 score), reward_spread the
-- mean over the step's groups of that reward's sample std within the group (how much the rollouts of one prompt
-- differed), n_scored the rollouts with a reward.
-- Columns: run_id, round, stage, step, groups, zero_std_groups, zero_std_share, reward_std_mean, reward_mean,
-- reward_spread, n_scored.
-- param run_id VARCHAR = NULL: only this run (NULL: every run)
-- param group_size INTEGER = NULL: G of the generator update (NULL: from the checkpoint)
-- param lam DOUBLE = 1.0: weight of R_anchor in the generator's reward curve (Eq. 17 / 24; the paper's 1)
WITH ckpt AS (
    SELECT run_id, round, max(json_extract(metrics_json, '$.steps')::INTEGER) AS n_steps,
           max(json_extract(metrics_json, '$.group_size')::INTEGER) AS group_size
    FROM checkpoints
    WHERE role = 'generator' AND ($run_id IS NULL OR run_id = $run_id)
    GROUP BY ALL
),
gen AS (
    SELECT r.run_id, r.round, r.set_id, r.rollout, r.advantage AS reward, r.r_disc + $lam * r.r_anchor AS raw,
           coalesce($group_size, c.group_size,
                    CASE WHEN c.n_steps > 0 THEN (max(r.rollout) OVER (PARTITION BY r.run_id, r.round) + 1) // c.n_steps
                    END) AS g
    FROM rewards AS r
    LEFT JOIN ckpt AS c USING (run_id, round)
    WHERE r.stage = 'generator' AND ($run_id IS NULL OR r.run_id = $run_id)
),
gen_groups AS (
    SELECT run_id, round, 'generator' AS stage, rollout // nullif(g, 0) AS step, set_id,
           stddev_samp(reward) AS reward_std, avg(raw) AS raw_mean, stddev_samp(raw) AS raw_std, count(raw) AS n
    FROM gen
    GROUP BY ALL
),
pol AS (
    SELECT run_id, round, set_id, rollout, count(*) OVER (PARTITION BY run_id, round, set_id) AS g
    FROM rewards
    WHERE stage = 'policy' AND ($run_id IS NULL OR run_id = $run_id)
),
pol_groups AS (
    SELECT p.run_id, p.round, 'policy' AS stage, min(p.rollout // p.g) AS step, p.set_id,
           stddev_samp(s.score) AS reward_std, avg(s.score) AS raw_mean, stddev_samp(s.score) AS raw_std,
           count(s.score) AS n
    FROM pol AS p
    LEFT JOIN scores AS s
           ON s.run_id = p.run_id AND s.round = p.round AND s.stage = 'policy' AND s.set_id = p.set_id
          AND s.target = 'C' AND s.response = p.rollout % p.g
    GROUP BY ALL
)
SELECT run_id, round, stage, step,
       count(*) AS groups,
       count(*) FILTER (WHERE reward_std IS NULL OR reward_std < 1e-6) AS zero_std_groups,
       count(*) FILTER (WHERE reward_std IS NULL OR reward_std < 1e-6) / count(*) AS zero_std_share,
       avg(reward_std) AS reward_std_mean,
       sum(raw_mean * n) / nullif(sum(n), 0) AS reward_mean,
       avg(raw_std) AS reward_spread,
       sum(n) AS n_scored
FROM (SELECT * FROM gen_groups UNION ALL SELECT * FROM pol_groups)
GROUP BY ALL
ORDER BY run_id, round, stage, step
