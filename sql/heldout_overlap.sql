-- heldout_overlap: AUDIT, must return no rows. Held-out policy-evaluation prompts that also appear in training:
-- as an anchor prompt (anchors table, any dataset) or as a prompt the policy was sampled on (a prompts-table row of
-- another dataset whose prompt_id occurs in samples). Prompts match on text, case-folded, whitespace collapsed.
-- grain: one row per (held-out prompt, overlapping training prompt).
-- Columns: heldout_prompt_id, source ('anchors' | 'samples'), dataset, prompt_id, prompt.
-- param heldout VARCHAR: dataset name of the held-out prompts in the prompts table
WITH held AS (
    SELECT prompt_id, prompt, regexp_replace(lower(trim(prompt)), '\s+', ' ', 'g') AS norm
    FROM prompts
    WHERE dataset = $heldout
),
trained AS (
    SELECT DISTINCT 'anchors' AS source, dataset, prompt_id, prompt FROM anchors
    UNION ALL
    SELECT DISTINCT 'samples' AS source, p.dataset, p.prompt_id, p.prompt
    FROM prompts p
    WHERE p.dataset <> $heldout AND p.prompt_id IN (SELECT DISTINCT prompt_id FROM samples)
)
SELECT h.prompt_id AS heldout_prompt_id, t.source, t.dataset, t.prompt_id, t.prompt
FROM held h
JOIN trained t ON regexp_replace(lower(trim(t.prompt)), '\s+', ' ', 'g') = h.norm
ORDER BY heldout_prompt_id, source, dataset, prompt_id
