-- split_overlap: AUDIT, must return no rows. Prompts of one dataset of the prompts table ($heldout) whose text also
-- occurs in another ($train): proves a held-out evaluation split is disjoint from the training split
-- (infra/benchmarks/bench_learning.py). Prompts match on text, case-folded, whitespace collapsed, and on prompt_id.
-- grain: one row per (held-out prompt, overlapping training prompt).
-- Columns: heldout_prompt_id, train_prompt_id, match ('text' | 'id'), prompt.
-- param heldout VARCHAR: dataset name of the held-out prompts
-- param train VARCHAR: dataset name of the training prompts
WITH held AS (
    SELECT prompt_id, prompt, regexp_replace(lower(trim(prompt)), '\s+', ' ', 'g') AS norm
    FROM prompts WHERE dataset = $heldout
),
trained AS (
    SELECT prompt_id, prompt, regexp_replace(lower(trim(prompt)), '\s+', ' ', 'g') AS norm
    FROM prompts WHERE dataset = $train
)
SELECT h.prompt_id AS heldout_prompt_id, t.prompt_id AS train_prompt_id,
       CASE WHEN h.norm = t.norm THEN 'text' ELSE 'id' END AS match, h.prompt
FROM held h
JOIN trained t ON h.norm = t.norm OR h.prompt_id = t.prompt_id
ORDER BY heldout_prompt_id, train_prompt_id
