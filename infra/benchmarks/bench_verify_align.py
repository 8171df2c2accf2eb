"""Benchmark (not a test), an experiment: would padding each verifier prompt's shared prefix to a KV-block boundary
remove verification's block granularity, and what does it do to the verdicts?

One engine (the project's block size, 32 on CPU), the tiny preset's verifier (its model, plain prompt and balanced
verdicts), ``bench_verify.py``'s 72 checks; ``--repeats`` interleaved passes of: the raw prefill rate
(``bench_verify.raw_prefill_rate``), ``new`` (``verify()`` as it is) and ``aligned`` (the same ``verify()``, the
engine's render wrapped to insert newline tokens where the criterion starts, so the shared prefix ends on a block
boundary). Both are priced against the ideal of the UNPADDED prompts' unique tokens at the pass's raw rate. The
verdict threshold is computed once on the unpadded probe, so both arms use the same one. Prints and writes the
JSON (``--output``). Padding is not in the product: docs/benchmarks/performance.md says why.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_verify_align.py \\
        --output infra/benchmarks/results/bench_verify_align.json
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import bench_verify as bv  # noqa: E402

from dr_core.datasets import load_ranked  # noqa: E402
from dr_core.evaluator.items import Check  # noqa: E402
from dr_core.evaluator.verify import send_order, verify  # noqa: E402
from dr_core.paths import bundled  # noqa: E402


def lcp(a, b):
    """The length of the common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def aligned_render(engine, block, filler, pads):
    """The engine's render, padding a verifier prompt with ``filler`` where its criterion starts to a multiple of
    ``block`` tokens (each pad length appended to ``pads``)."""
    plain = engine.render

    def render(conv):
        ids = plain(conv)
        content = conv[-1]["content"]
        idx = max(content.rfind("[Criterion]"), content.rfind("Criterion: "))
        if idx < 0:
            return ids
        alt = [*conv[:-1], {**conv[-1], "content": content[:idx] + "Z"}]
        cut = lcp(ids, plain(alt))
        pad = (-cut) % block
        pads.append(pad)
        return ids[:cut] + [filler] * pad + ids[cut:]

    return render


def timed(engine, checks):
    """One cold ``verify()`` of the checks: (seconds, verdicts, stats)."""
    if bv.MODE != "choice":
        bv.verdict_bias(engine, None, bv.STYLE, bv.MODE)
    engine.reset_prefix_cache()
    t = time.perf_counter()
    verdicts, stats = verify(engine, checks, max_tokens=bv.MAX_TOKENS, verdict_mode=bv.MODE, verifier_prompt=bv.STYLE)
    return time.perf_counter() - t, verdicts, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--responses", type=int, default=3)
    ap.add_argument("--output", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    ns = argparse.Namespace(verifier="tiny", model="default", dtype="auto")
    bv.use_verifier(ns)
    from dr_core.engines.vllm_engine import VLLMEngine

    rows = load_ranked(bundled("anchors_alpacaeval.jsonl"), limit=args.prompts)
    checks = [Check(r.prompt, resp, c) for r in rows for resp in r.responses[: args.responses] for c in bv.CRITERIA]
    engine, block = bv.open_engine(VLLMEngine, ns, None)
    print("dtype", engine.config.dtype, "block", block, "mode", bv.MODE, "style", bv.STYLE, file=sys.stderr)
    plain = engine.render
    unique = bv.unique_tokens(bv._rendered(engine, send_order(checks)))
    filler = engine.tokenizer.encode("\n", add_special_tokens=False)[0]
    pads: list[int] = []
    aligned = aligned_render(engine, block, filler, pads)
    # the bias of the balanced mode is computed per engine (cached): compute with each render once, not timed
    res = {"new": [], "aligned": []}
    verdicts = {}
    raws = []
    for _ in range(args.repeats):
        engine.render = plain
        raw = bv.raw_prefill_rate(engine, checks)
        raws.append(raw)
        ideal_s = unique / raw
        for name in ("new", "aligned"):
            engine.render = plain if name == "new" else aligned
            s, v, stats = timed(engine, checks)
            res[name].append((s / ideal_s, s, stats.prompt_tokens, stats.cached_tokens))
            verdicts.setdefault(name, []).append(v)
    engine.render = plain
    out = {"unique_unpadded": unique, "raw": raws, "mean_pad": statistics.mean(pads) if pads else None}
    for name, r in res.items():
        out[name] = {
            "cost_over_ideal_median": statistics.median(x[0] for x in r),
            "per_pass": [round(x[0], 3) for x in r],
            "seconds": [round(x[1], 2) for x in r],
            "prompt_tokens": r[0][2],
            "computed": r[0][2] - r[0][3],
        }
    a, n = verdicts["aligned"][0], verdicts["new"][0]
    out["agree_aligned_new"] = sum(x == y for x, y in zip(a, n)) / len(n)
    out["yes_new"], out["yes_aligned"] = sum(v == 1 for v in n), sum(v == 1 for v in a)
    out["reruns_stable"] = {k: all(x == v[0] for x in v) for k, v in verdicts.items()}
    print(json.dumps(out, indent=1))
    if args.output:
        args.output.write_text(json.dumps(out, indent=1) + "\n")
    engine.close()


if __name__ == "__main__":
    main()
