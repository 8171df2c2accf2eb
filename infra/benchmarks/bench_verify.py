"""Benchmark (not a test): verification throughput of the project's verifier layout against the naive one.

Same engine, same (prompt, response, criterion) checks, prefix cache reset before each arm:
- ``shared_prefix``: the project's layout (instructions, prompt, response first; criterion last), sent as one
  batch grouped by response, so vLLM's prefix cache serves the K x M checks of a response from one prefill.
- ``naive``: one request per criterion with the criterion first, so no two checks share more than the system
  prompt and every check pays its full prefill.
Figures: verdicts/s and prompt tokens/s of each arm and their ratio (measured in this one run), and the cost per
verdict of the shared-prefix layout against the ideal "prefill only the unique tokens" cost (unique tokens of
all prompts, as a token trie, at the raw prefill rate measured by the naive arm).

    flock /tmp/dr-heavy.lock .venv/bin/python infra/benchmarks/bench_verify.py --prompts 3 --responses 3 \\
        --output bench_verify.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dr_core.rubric import prompts
from dr_core.config import EngineConfig  # noqa: E402
from dr_core.datasets import load_ranked  # noqa: E402
from dr_core.paths import bundled  # noqa: E402

#: Generic criteria, so that both arms check exactly the same things.
CRITERIA = (
    "The response answers the question that was asked.",
    "The response is factually accurate.",
    "The response gives concrete examples.",
    "The response is well organised, with lists or paragraphs.",
    "The response avoids unnecessary repetition.",
    "The response is concise.",
    "The response uses a polite and helpful tone.",
    "The response contains no harmful or unsafe advice.",
)


def unique_tokens(sequences: list[list[int]]) -> int:
    """Tokens in the prefix trie of all sequences: what prefilling each shared prefix once would cost."""
    total, prev = 0, []
    for seq in sorted(sequences):
        lcp = 0
        for a, b in zip(seq, prev):
            if a != b:
                break
            lcp += 1
        total += len(seq) - lcp
        prev = seq
    return total


def run_arm(engine, checks, layout: str) -> dict:
    convs = [prompts.verifier_messages(p, r, c, layout=layout) for p, r, c in checks]
    engine.reset_prefix_cache()
    start = time.perf_counter()
    outs = engine.chat(convs, max_tokens=4, temperature=0.0, choices=list(prompts.VERDICT_CHOICES))
    seconds = time.perf_counter() - start
    prompt_tokens = sum(o.prompt_tokens for o in outs)
    cached = sum(o.cached_tokens or 0 for o in outs)
    return {
        "layout": layout,
        "verdicts": len(outs),
        "seconds": seconds,
        "verdicts_per_s": len(outs) / seconds,
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_per_s": prompt_tokens / seconds,
        "cached_tokens": cached,
        "computed_prompt_tokens": prompt_tokens - cached,
        "ms_per_verdict": 1000 * seconds / len(outs),
        "unscorable": sum(o.texts[0] not in prompts.VERDICT_CHOICES for o in outs),
        "unique_prompt_tokens": unique_tokens([engine.render(c) for c in convs]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=3, help="anchor prompts from the bundled AlpacaEval slice")
    ap.add_argument("--responses", type=int, default=3, help="responses per prompt")
    ap.add_argument("--criteria", type=int, default=len(CRITERIA), help=f"criteria per response (<= {len(CRITERIA)})")
    ap.add_argument("--model", default="default", help="checkpoint directory or 'default'")
    ap.add_argument("--output", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from dr_core.engines.vllm_engine import VLLMEngine
    from dr_core.model import prepare_default_model

    if args.model == "default":
        prepare_default_model(lambda m: print(m, file=sys.stderr))
    rows = load_ranked(bundled("anchors_alpacaeval.jsonl"), limit=args.prompts)
    checks = [(r.prompt, resp, c) for r in rows for resp in r.responses[: args.responses] for c in CRITERIA[: args.criteria]]
    engine = VLLMEngine(EngineConfig(model=args.model, max_model_len=4096))
    engine.chat([[{"role": "user", "content": "warm up"}]], max_tokens=2)

    naive = run_arm(engine, checks, "criterion_first")
    shared = run_arm(engine, checks, "shared_prefix_first")
    raw_prefill_rate = naive["computed_prompt_tokens"] / naive["seconds"]  # tokens/s when nearly nothing is cached
    ideal_ms = 1000 * shared["unique_prompt_tokens"] / raw_prefill_rate / shared["verdicts"]
    result = {
        "model": engine.model_name,
        "checks": len(checks),
        "prompts": args.prompts,
        "responses_per_prompt": args.responses,
        "criteria_per_response": args.criteria,
        "naive": naive,
        "shared_prefix": shared,
        "speedup_verdicts_per_s": shared["verdicts_per_s"] / naive["verdicts_per_s"],
        "raw_prefill_tokens_per_s": raw_prefill_rate,
        "ideal_unique_prefill_ms_per_verdict": ideal_ms,
        "shared_prefix_cost_over_ideal": shared["ms_per_verdict"] / ideal_ms,
    }
    engine.close()
    text = json.dumps(result, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    print(
        f"\n{len(checks)} verdicts: shared-prefix {shared['verdicts_per_s']:.2f} verdicts/s vs naive "
        f"{naive['verdicts_per_s']:.2f} -> {result['speedup_verdicts_per_s']:.1f}x; "
        f"{shared['ms_per_verdict']:.0f} ms/verdict vs {ideal_ms:.0f} ms ideal (unique-token prefill), "
        f"{result['shared_prefix_cost_over_ideal']:.2f}x",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
