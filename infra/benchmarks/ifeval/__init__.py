"""The IFEval benchmark's parts (``infra/benchmarks/bench_ifeval.py`` is the script):

- protocol.py: the pre-registered protocol as data (and its smoke sizes);
- run.py: one run's state (protocol, work directory with its stored phases, splits and their audit, models, result);
- evaluator.py: P(0)'s sets and answers, the held-out anchors, the gate, G(0) -> G(S), criterion (b);
- policy.py: the three policy arms and every policy's held-out accuracy by code;
- stats.py: Spearman agreement, the hierarchical bootstrap (seeds, then prompts), training curves (numpy);
- render.py: a finished result's tables as Markdown.
"""
