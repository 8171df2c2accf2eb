-- anchor_lists: ranked anchor lists of one dataset, one row per prompt, responses best first (what a round's
-- anchors file holds; the anchor refresh writes the lists that pass anchor_filter in this shape).
-- grain: one row per prompt_id of the anchors table within $dataset.
-- Columns: prompt_id, prompt, responses (list, by rank), scores (list, by rank; an element is NULL where the file
-- gave no score).
-- param dataset VARCHAR: the ingested dataset (no default: required)
SELECT prompt_id, any_value(prompt) AS prompt, list(response ORDER BY rank) AS responses,
       list(score ORDER BY rank) AS scores
FROM anchors
WHERE dataset = $dataset
GROUP BY prompt_id
ORDER BY prompt_id
