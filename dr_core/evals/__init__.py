"""The work of the evaluation commands, without Prefect or a CLI framework: the evaluator on labelled preference
data (evaluate: ``dr eval-evaluator``, ``dr score``), a policy against a baseline or on verifiable tasks
(policy_eval: ``dr eval-policy``; the in-loop evaluation of ``dr_core.runs.heldout`` uses it too) and the Bradley-Terry
reward model baseline (reward_model)."""
