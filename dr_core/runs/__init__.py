"""The work of the pipeline's steps, without Prefect: what a step passes on (refs), a round's steps (round_steps,
shards), the GRPO updates (updates), the in-loop policy evaluation (heldout), stale-versus-fresh, the anchor refresh
and ingest; and dr doctor's checks (doctor). The evaluation commands' work is in ``dr_core.evals``."""
