-- anchor_filter: the paper's appendix B (B.1) filters applied to ranked anchor lists.
-- grain: one row per (dataset, prompt_id) of the anchors table; kept lists only unless $include_rejected.
-- Rules, numbered in the paper's order; reject_reason is the first that fails, checked 1, 2, 3, 4, 6, 5 so that
-- the specific reason (boilerplate) is named before the catch-all (few useful):
--   1. too_few_responses: at least $min_responses responses (paper: 7 for Nectar; our AlpacaEval lists have 11).
--      Exact.
--   2. short_prompt / short_top_response: the prompt and the rank-1 response each longer than $min_chars
--      characters (paper: 50). Exact.
--   The set-level rules look at the first $head responses by rank (paper: the first seven):
--   3. repetitive: any response with repetitive generation. APPROXIMATED: a response of 20+ words whose distinct
--      word 4-grams are under half of its 4-grams (fluent text repeats almost none), or of 6+ non-empty lines
--      whose distinct lines are under half of its lines.
--   4. degenerate: at least $max_bad (paper: 4) degenerate responses. APPROXIMATED by patterns: broken text (a
--      U+FFFD replacement character, under 5 characters, or under 20% letters and digits), a plain refusal (starts like
--      "I'm sorry / I cannot / As an AI" and is under 200 characters: a refusal with helpful alternatives is
--      longer), greeting-only ("Hello! How can I help you today?"), clarification-only (under 200 characters,
--      ends with "?", asks the user to clarify/provide/specify).
--   5. few_useful: fewer than $min_useful (paper: 4) useful responses. APPROXIMATED: useful = neither degenerate,
--      repetitive nor boilerplate (the paper's "substantive answers, refusals with helpful alternatives, and other
--      nontrivial responses").
--   6. boilerplate: at least $max_bad responses mostly boilerplate. APPROXIMATED: stock phrases ("As an AI
--      language model", "I hope this helps", "Let me know if...", "Feel free to ask", "Is there anything else")
--      removed, under half of the response's characters remain.
-- The paper's classifiers for degenerate/useful/boilerplate are not published; these patterns are deliberately
-- conservative (they only reject lists with obvious problems).
-- Columns: dataset, prompt_id, n_responses, prompt_chars, top_chars, n_repetitive, n_degenerate, n_useful,
-- n_boilerplate, reject_reason (NULL when kept).
-- param min_responses INTEGER = 7: minimum list length (rule 1)
-- param min_chars INTEGER = 50: the prompt and the top response must be longer than this (rule 2)
-- param head INTEGER = 7: the set-level rules look at ranks 1..head
-- param max_bad INTEGER = 4: reject at this many degenerate, or boilerplate, responses (rules 4 and 6)
-- param min_useful INTEGER = 4: reject below this many useful responses (rule 5)
-- param dataset VARCHAR = NULL: only this dataset (NULL: every dataset)
-- param include_rejected BOOLEAN = false: also list rejected prompts, with their reject_reason
WITH lists AS (
    SELECT dataset, prompt_id, any_value(prompt) AS prompt, count(*) AS n_responses,
           length(any_value(response) FILTER (WHERE rank = 1)) AS top_chars
    FROM anchors
    WHERE $dataset IS NULL OR dataset = $dataset
    GROUP BY dataset, prompt_id
),
head AS (
    SELECT dataset, prompt_id, response, lower(trim(response)) AS low,
           string_split_regex(lower(trim(response)), '\s+') AS words,
           list_filter(string_split(trim(response), chr(10)), lambda l: trim(l) <> '') AS lines
    FROM anchors
    WHERE rank <= $head AND ($dataset IS NULL OR dataset = $dataset)
),
flags AS (
    SELECT dataset, prompt_id,
           (len(words) >= 20 AND len(list_distinct(grams)) < 0.5 * len(grams))
           OR (len(lines) >= 6 AND len(list_distinct(lines)) < 0.5 * len(lines)) AS repetitive,
           contains(response, chr(65533))
           OR length(low) < 5
           OR length(regexp_replace(low, '[^\pL\pN]', '', 'g')) < 0.2 * length(low)
           OR (length(low) < 200 AND regexp_matches(low,
               '^(i''m sorry|i am sorry|sorry,|i apologi[sz]e|i cannot|i can''t|i can not|i won''t|i''m not able|i am not able|i''m unable|i am unable|as an ai)'))
           OR regexp_full_match(low,
               '(hi|hello|hey|greetings)( there)?[!.,]*\s*(how (can|may) i (help|assist) you( today)?\??)?[!.]*')
           OR (length(low) < 200 AND ends_with(low, '?') AND regexp_matches(low,
               '(could|can|would) you (please )?(clarify|provide|specify|explain what|tell me (more|what))|please (clarify|provide|specify)'))
           AS degenerate,
           length(trim(regexp_replace(low,
               '(as an ai( language model)?|i''m (just )?an ai|i hope (this|that) helps|let me know if [^.!?]*|feel free to [^.!?]*|is there anything else [^.!?]*|(sure|certainly|of course|great question)[!,.])',
               '', 'g'))) < 0.5 * length(low) AS boilerplate
    FROM (
        SELECT *, list_transform(range(1, len(words) - 2), lambda i: array_to_string(words[i:i + 3], ' ')) AS grams
        FROM head
    )
),
counts AS (
    SELECT dataset, prompt_id,
           count(*) FILTER (WHERE repetitive) AS n_repetitive,
           count(*) FILTER (WHERE degenerate) AS n_degenerate,
           count(*) FILTER (WHERE NOT (repetitive OR degenerate OR boilerplate)) AS n_useful,
           count(*) FILTER (WHERE boilerplate) AS n_boilerplate
    FROM flags
    GROUP BY dataset, prompt_id
),
judged AS (
    SELECT l.dataset, l.prompt_id, l.n_responses, length(l.prompt) AS prompt_chars, l.top_chars,
           c.n_repetitive, c.n_degenerate, c.n_useful, c.n_boilerplate,
           CASE
               WHEN l.n_responses < $min_responses THEN 'too_few_responses'
               WHEN length(l.prompt) <= $min_chars THEN 'short_prompt'
               WHEN coalesce(l.top_chars, 0) <= $min_chars THEN 'short_top_response'
               WHEN c.n_repetitive > 0 THEN 'repetitive'
               WHEN c.n_degenerate >= $max_bad THEN 'degenerate'
               WHEN c.n_boilerplate >= $max_bad THEN 'boilerplate'
               WHEN c.n_useful < $min_useful THEN 'few_useful'
           END AS reject_reason
    FROM lists AS l
    JOIN counts AS c USING (dataset, prompt_id)
)
SELECT *
FROM judged
WHERE $include_rejected OR reject_reason IS NULL
ORDER BY dataset, prompt_id
