"""The work of the pipeline's steps, without Prefect: what a step passes on (refs), a round's steps (round_steps,
shards), the GRPO updates (updates), the in-loop policy evaluation (heldout), stale-versus-fresh, the anchor refresh
and ingest; and the work of the evaluation commands (evaluate, policy_eval, reward_model)."""
