"""The learning benchmark's parts (``infra/benchmarks/bench_learning.py`` is the script and its options):

- run.py: one run's state (options, work directory with its cached phases, splits, engines, the result JSON);
- generator.py: phases 1-5, the splits and their audit, P(0)'s responses C, the sweep, the seeds of G(0) -> G(S)
  and their held-out measurement;
- policy.py: phase 6, P(0) trained by G(S) and by G(0), their held-out answers and the judge's verdicts;
- stats.py: per-prompt figures, bootstrap intervals, training curves (numpy only);
- render.py: a finished result JSON's tables as Markdown (the site renders the JSON itself:
  docs/benchmarks/learning.md).
"""
