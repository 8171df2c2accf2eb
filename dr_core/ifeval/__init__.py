"""The instruction-following testbed, where the truth is known: IFEval's verifiable instructions, checked by IFEval's
own code (the kept library if-verifiable), prompts with instructions attached by template, anchors ranked by code,
and policies scored by code (``dr eval-policy --task ifeval``, infra/benchmarks/bench_ifeval.py).

- checks.py: the rows, their validation, and every instruction's strict and loose verdict on a response;
- metrics.py: lm-eval's prompt- and instruction-level accuracies with bootstrap intervals;
- constraints.py: instructions attached to a prompt through the library's registry;
- edits.py: ranked anchors by code (one answer edited to meet n, n-1, ..., 0 instructions);
- testbed.py: the bundled training, tuning and held-out splits.
"""
