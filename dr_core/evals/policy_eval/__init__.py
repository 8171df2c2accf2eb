"""Policy evaluation (paper section 4.3, appendix C.2, F.2): does the policy answer better than a baseline?

Pairwise, judged: the policy's answers (generated greedily by a model, or read from a saved {"id","answer"} file)
against the baseline's (another model's, a saved file's, or the data file's own ``baseline`` answers: Arena-Hard's
GPT-4-0314). A pairwise judge, any engine, compares each pair in BOTH orders (``dr_core.evaluator.judge``: by default
the order-cancelling first-token log-odds of "A" against "B"; or structured choice), so the order cannot decide.
The outcomes, win rate, tie rate, bootstrap interval, answer lengths and the judge's position bias are defined in
dr_core/evals/policy_eval/scoring.py.

Verifiable tasks (section 5.2, appendix C.3): the policy answers {"prompt","answer"} prompts and
``dr_core.evaluator.answers`` checks each final answer (exact, numeric, math via Math-Verify): accuracy, and the
baseline checkpoint's when given. ``--task ifeval``: IFEval-shaped rows ({"key"|"id", "prompt",
"instruction_id_list", "kwargs"}, every line validated first: dr_core/ifeval/checks.py) answered by the policy (or
read from saved answers) and checked by IFEval's own code: lm-eval's prompt- and instruction-level strict and loose
accuracies with 95 % intervals.

The package: ``run.py`` is the command (``run_eval_policy``: validate every input, resolve the engines, run the
phases); ``answers.py`` is where answers come from; ``scoring.py`` scores them. Their names are importable from the
package.

The word ``default`` names a role of ``roles`` (the CLI's ``--preset``, tiny by default, or ``--engines`` file): the
judge is its verifier model (as the in-loop evaluation's judge, dr_core/runs/heldout.py), the policy and a baseline
its policy model. The models are said in one line before any is loaded (``models: preset tiny — policy ...``).

    dr eval-policy --policy default --data dr_core/data/policy_eval_arenahard.jsonl --judge default --limit 4 \\
        --output metrics.json
    dr eval-policy --policy mine.jsonl --baseline theirs.jsonl --data prompts.jsonl --judge default
"""

from __future__ import annotations

from dr_core.evals.policy_eval import run as _run
from dr_core.evals.policy_eval.run import *  # noqa: F403 - the package's names are run.py's __all__

__all__ = list(_run.__all__)
