"""The gap-analysis report of one run: named queries in ``sql/`` -> plain data (``collect``) -> one self-contained
HTML page (``render``, Jinja2 templates in ``templates/``) -> report.html and report.json (``write``).

    dr report --store ./store --run-id demo --out ./report        # -> ./report/report.html and report.json

What it shows, round over round (paper sections 3.1, 4.4, Figure 2, appendix H):
  gap          Eq. 2 gap on the ranked anchor lists (sql/gap_by_round) and the score spread on the policy's own
               sets C (sql/set_gap: C has no reference order, so mean |S_i - S_j| over pairs)
  warnings     degenerate signal in words, at the top of the page and in report.json (dr_core.scoring.signals): GRPO
  steps
               without gradient, a verifier that says yes (or no) to almost everything, constant scores
  signal       per round: the verifier's yes-rate on the measured sets (sql/stage_costs), the share of sets with
               constant scores (sql/set_gap), the update steps without gradient (sql/training_signal)
  training     R_disc (Eq. 13) and R_anchor (Eq. 15) of the generator update's rollouts per GRPO step
               (sql/training_rewards), and the share of its GRPO groups with zero reward std per step
               (sql/training_signal); the same share for the policy update
  saturation   rubric items every response of a set answers alike (sql/saturation)
  accuracy     evaluator accuracy on the held-out eval slice (sql/eval_summary)
  win-rate     the policy P(t) against P(0) on held-out prompts, by a pairwise judge (sql/eval_summary)
  stale-fresh  the same sets of P(t-1) scored by the stale G(t-1) and the fresh G(t) (stages "stale"/"fresh", written
               by ``dr stale-fresh``): the paper's Figure 2 comparison for this run
  examples     rubric, verdict matrix and Eq. 12 scores for a few prompts (sql/case_study; appendix H)
  cost         tokens, rubric and verdict counts, training seconds per stage and round, flow executions and their
               steps (sql/stage_costs, sql/run_log, sql/step_times)

Figures are inline SVG (``dr_core.report.svg``); the page loads nothing from anywhere (no scripts, no external CSS or
fonts), and text from the data is escaped (Jinja2 autoescape) with "://" broken by a zero-width space, so the raw HTML
holds no URL a
browser could fetch. Missing data (a run without training, no eval, no stale-fresh run) shows as "no data"; a query
that fails leaves its part of the page as "no data" and is listed under "Query errors", it never stops the report.
"""
