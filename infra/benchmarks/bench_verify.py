"""Benchmark (not a test): verification throughput of the project's verifier against the naive layout and today's code.

One run, the same (prompt, response, criterion) checks in every arm, the prefix cache reset before each arm, two
engines open side by side (the same model; only the KV-cache block size differs):

- ``naive``: one request per check with the criterion first (``verifier_messages(layout="criterion_first")``), so
  no two checks share more than the system prompt and every check pays its full prefill (today's engine).
- ``today``: the project's verifier as it was: ``verify()`` (shared prefix first, criterion last, checks of one
  response adjacent) on an engine with vLLM's CPU default block size, 128 (``--today-block-size``).
- ``new``: the same ``verify()`` on an engine with the project's block size (``EngineConfig.block_size`` None: 32
  on CPU, the smallest the CPU attention kernel takes).
- ``leaders``: the requests of ``new``, first one "leader" per distinct (prompt, response) in one call, then the rest
  in a second call, so every prefix is computed and cached before any follower is scheduled. An experiment: vLLM
  caches a block when it allocates it, so followers scheduled in their leader's own step already hit it.

The requests of ``today``, ``new`` and ``leaders`` are the same (the same prompt text per verdict; only order,
batching and block size differ), so they must give the same verdicts: the run checks it (``naive`` asks differently
worded questions and is compared for information only).

Figures: verdicts/s, prompt tokens computed / total (computed = not served by the prefix cache), ms per verdict,
the ratio new/today, and each arm's cost against the ideal: the unique tokens of its prompts (a token trie: each
shared prefix once) at the raw prefill rate. The raw rate is measured in every pass, next to the arms (a cold
prefill of the leaders alone, the faster of the two engines), and each arm's ratio is the median of its per-pass
ratios, so the load of a busy machine shifts both sides alike. The cost above the ideal is split into two measured
terms: block granularity (tokens computed beyond the unique ones, at the raw rate) and the per-request cost (as many
one-token prompts with the same sampling parameters: scheduling, the grammar, the decode step that ends each
answer). A decode probe compares the two block sizes on plain generation too.

    flock /tmp/dr-heavy.lock env OMP_NUM_THREADS=2 .venv/bin/python infra/benchmarks/bench_verify.py \\
        --output bench_verify.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dr_core.config import EngineConfig  # noqa: E402
from dr_core.datasets import load_ranked  # noqa: E402
from dr_core.evaluator.calibrate import (
    VERDICT_LOGPROBS,
    ask_logodds,
    calibrated_verdict,
    first_logodds,  # noqa: E402
    verdict_bias,
)
from dr_core.evaluator.items import Check  # noqa: E402
from dr_core.evaluator.verify import parse_verdict, send_order, verify  # noqa: E402
from dr_core.paths import bundled  # noqa: E402
from dr_core.rubric import prompts  # noqa: E402

#: Generic criteria, so that every arm checks exactly the same things.
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
#: What the benchmark's verify() calls ask for: the engine defaults' wording and verdicts (structured choice), or the
#: tiny preset's verifier's (``--verifier tiny``: plain prompt, balanced first-token log-odds); set in ``main``.
STYLE = "system"
MODE = "choice"
MAX_TOKENS = 4


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


def block_hit_tokens(sequences: list[list[int]], block: int) -> int:
    """Prompt tokens a block-granular prefix cache computes when the sequences are sent in this order (nothing
    evicted): each prompt reuses its longest run of full blocks already seen, never its last token."""
    seen: set[tuple[int, ...]] = set()
    computed = 0
    for seq in sequences:
        hit = 0
        for b in range((len(seq) - 1) // block):
            if tuple(seq[: (b + 1) * block]) not in seen:
                break
            hit = (b + 1) * block
        computed += len(seq) - hit
        seen.update(tuple(seq[: (b + 1) * block]) for b in range(len(seq) // block))
    return computed


def _figures(name: str, engine, block: int, verdicts, outs_or_stats, seconds: float, sent: list[list[int]]) -> dict:
    if isinstance(outs_or_stats, list):
        prompt_tokens = sum(o.prompt_tokens for o in outs_or_stats)
        cached = sum(o.cached_tokens or 0 for o in outs_or_stats)
    else:
        prompt_tokens, cached = outs_or_stats.prompt_tokens, outs_or_stats.cached_tokens
    n = len(verdicts)
    return {
        "arm": name,
        "block_size": block,
        "verdicts": n,
        "seconds": seconds,
        "verdicts_per_s": n / seconds,
        "ms_per_verdict": 1000 * seconds / n,
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached,
        "computed_prompt_tokens": prompt_tokens - cached,
        "computed_prompt_tokens_per_s": (prompt_tokens - cached) / seconds,
        "unique_prompt_tokens": unique_tokens(sent),
        "predicted_computed_tokens": block_hit_tokens(sent, block),
        "unscorable": sum(v is None for v in verdicts),
        "yes": sum(v == 1 for v in verdicts),
    }


def run_naive(engine, block: int, checks: list[Check]) -> tuple[dict, list]:
    convs = [prompts.verifier_messages(c.prompt, c.response, c.criterion, layout="criterion_first") for c in checks]
    engine.reset_prefix_cache()
    start = time.perf_counter()
    outs = engine.chat(convs, max_tokens=MAX_TOKENS, temperature=0.0, choices=list(prompts.VERDICT_CHOICES))
    seconds = time.perf_counter() - start
    verdicts = [parse_verdict(o.texts[0], o.finish_reasons[0]) for o in outs]
    return _figures("naive", engine, block, verdicts, outs, seconds, [engine.render(c) for c in convs]), verdicts


def _rendered(engine, checks: list[Check]) -> list[list[int]]:
    return [engine.render(prompts.verifier_messages(c.prompt, c.response, c.criterion, style=STYLE)) for c in checks]


def run_verify(name: str, engine, block: int, checks: list[Check]) -> tuple[dict, list]:
    """The project's verifier, as the evaluator and the GRPO reward call it (a log-odds mode's threshold is computed
    before the clock starts: a run computes it once per engine)."""
    if MODE != "choice":
        verdict_bias(engine, None, STYLE, MODE)
    engine.reset_prefix_cache()
    start = time.perf_counter()
    verdicts, stats = verify(engine, checks, max_tokens=MAX_TOKENS, verdict_mode=MODE, verifier_prompt=STYLE)
    seconds = time.perf_counter() - start
    return _figures(name, engine, block, verdicts, stats, seconds, _rendered(engine, send_order(checks))), verdicts


def split_leaders(checks: list[Check]) -> tuple[list[Check], list[Check]]:
    """(the first check of every (prompt, response), all the others), both in ``send_order``."""
    seen: set[tuple[str, str]] = set()
    leaders, followers = [], []
    for c in send_order(checks):
        (followers if (c.prompt, c.response) in seen else leaders).append(c)
        seen.add((c.prompt, c.response))
    return leaders, followers


def _ask(engine, checks: list[Check]):
    if MODE != "choice":
        return ask_logodds(engine, checks, STYLE)
    return engine.chat(
        [prompts.verifier_messages(c.prompt, c.response, c.criterion, style=STYLE) for c in checks],
        max_tokens=MAX_TOKENS,
        temperature=0.0,
        choices=list(prompts.VERDICT_CHOICES),
    )


def _verdicts(engine, checks: list[Check], outs) -> list:
    if MODE != "choice":
        bias = verdict_bias(engine, None, STYLE, MODE)
        return [calibrated_verdict(first_logodds(o), bias) for o in outs]
    return [parse_verdict(o.texts[0], o.finish_reasons[0]) for o in outs]


def run_leaders(engine, block: int, checks: list[Check]) -> tuple[dict, list]:
    """One leader per (prompt, response) in a first call, every other check in a second one."""
    leaders, followers = split_leaders(checks)
    engine.reset_prefix_cache()
    start = time.perf_counter()
    outs = _ask(engine, leaders) + _ask(engine, followers)
    seconds = time.perf_counter() - start
    got = dict(zip(leaders + followers, _verdicts(engine, leaders + followers, outs)))
    verdicts = [got[c] for c in checks]
    return _figures("leaders", engine, block, verdicts, outs, seconds, _rendered(engine, leaders + followers)), verdicts


def raw_prefill_rate(engine, checks: list[Check]) -> float:
    """Prompt tokens/s of a cold prefill of the leaders alone (one check per distinct prefix: nothing in common but
    the system prompt, so nearly every token is computed): the rate the ideal is priced at."""
    leaders, _ = split_leaders(checks)
    engine.reset_prefix_cache()
    start = time.perf_counter()
    outs = _ask(engine, leaders)
    seconds = time.perf_counter() - start
    return sum(o.prompt_tokens - (o.cached_tokens or 0) for o in outs) / seconds


def per_request_cost(engine, requests: int) -> float:
    """Seconds per request of ``requests`` one-token prompts asked the verdict question's sampling parameters."""
    from vllm import SamplingParams, TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    params = (
        SamplingParams(n=1, temperature=0.0, max_tokens=1, logprobs=VERDICT_LOGPROBS)
        if MODE != "choice"
        else SamplingParams(
            n=1,
            temperature=0.0,
            max_tokens=MAX_TOKENS,
            structured_outputs=StructuredOutputsParams(choice=list(prompts.VERDICT_CHOICES)),
        )
    )
    token = engine.render([{"role": "user", "content": "Hi"}])[0]
    start = time.perf_counter()
    engine.llm.generate([TokensPrompt(prompt_token_ids=[token]) for _ in range(requests)], params, use_tqdm=False)
    return (time.perf_counter() - start) / requests


def decode_rate(engine, prompts_n: int = 4, tokens: int = 64) -> float:
    """Output tokens/s of plain generation (prompts_n prompts x tokens, no EOS): does the block size cost decode?"""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(n=1, temperature=0.0, max_tokens=tokens, ignore_eos=True)
    ids = [
        engine.render([{"role": "user", "content": f"Tell me a long story about the number {i}."}])
        for i in range(prompts_n)
    ]
    engine.reset_prefix_cache()
    start = time.perf_counter()
    engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
    return prompts_n * tokens / (time.perf_counter() - start)


def table(rows: list[dict]) -> str:
    lines = [
        "| arm | block | verdicts/s | ms/verdict | prompt tokens computed / total | unique | x ideal |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['arm']} | {r['block_size']} | {r['verdicts_per_s']:.2f} | {r['ms_per_verdict']:.0f} | "
            f"{r['computed_prompt_tokens']:,} / {r['prompt_tokens']:,} | {r['unique_prompt_tokens']:,} | "
            f"{r['cost_over_ideal']:.2f}x |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=3, help="anchor prompts from the bundled AlpacaEval slice")
    ap.add_argument("--responses", type=int, default=3, help="responses per prompt")
    ap.add_argument("--criteria", type=int, default=len(CRITERIA), help=f"criteria per response (<= {len(CRITERIA)})")
    ap.add_argument("--model", default="default", help="checkpoint directory or 'default'")
    ap.add_argument(
        "--verifier",
        choices=["default", "tiny"],
        default="default",
        help="'tiny': the tiny preset's verifier (its model, plain prompt and balanced verdicts) instead of "
        "--model with the system prompt and structured choice (the naive arm keeps the system wording: "
        "the plain prompt has no criterion-first layout)",
    )
    ap.add_argument(
        "--dtype", default="auto", help="the engines' dtype (auto: this machine's, dr_core/config/numerics.py)"
    )
    ap.add_argument("--today-block-size", type=int, default=128, help="today's engine: vLLM's CPU default")
    ap.add_argument(
        "--new-block-size",
        type=int,
        default=None,
        help="the new engine's EngineConfig.block_size (default None: the project's, 32 on CPU)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="passes over the raw/today/new/leaders arms, interleaved (the median is kept)",
    )
    ap.add_argument("--output", type=Path, help="write the figures as JSON here")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from dr_core.engines.vllm_engine import VLLMEngine

    use_verifier(args)
    rows = load_ranked(bundled("anchors_alpacaeval.jsonl"), limit=args.prompts)
    checks = [
        Check(r.prompt, resp, c)
        for r in rows
        for resp in r.responses[: args.responses]
        for c in CRITERIA[: args.criteria]
    ]
    today = open_engine(VLLMEngine, args, args.today_block_size)
    new = open_engine(VLLMEngine, args, args.new_block_size)
    print(f"engines open: today block {today[1]}, new block {new[1]}", file=sys.stderr)
    naive, naive_v = run_naive(*today, checks)
    passes, raw_rates, verdicts = interleaved_passes(args.repeats, today, new, checks)
    per_request = {"today": per_request_cost(today[0], len(checks)), "new": per_request_cost(new[0], len(checks))}
    decode = {"today": decode_rate(today[0]), "new": decode_rate(new[0])}
    model_name = new[0].model_name
    today[0].close()
    new[0].close()
    result = summary(args, checks, model_name, naive, naive_v, passes, raw_rates, verdicts, per_request, decode)
    text = json.dumps(result, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    print_report(result, len(checks), args.repeats, len(split_leaders(checks)[0]), (today[1], new[1]))


def use_verifier(args) -> None:
    """``--verifier tiny``: the tiny preset's model, prompt and verdict mode (``STYLE``, ``MODE``); else ``--model``."""
    from dr_core.model import prepare_default_model

    global STYLE, MODE
    if args.verifier == "tiny":
        from dr_core.config import preset
        from dr_core.model import prepare

        tiny = preset("tiny").engines.verifier
        args.model = str(prepare(tiny.model, lambda m: print(m, file=sys.stderr)))
        STYLE, MODE = tiny.verifier_prompt, tiny.verdict_mode
    elif args.model == "default":
        prepare_default_model(lambda m: print(m, file=sys.stderr))


def open_engine(engine_cls, args, block) -> tuple:
    """An engine with KV-cache block size ``block`` (None: the project's), warmed up; (engine, its block size)."""
    engine = engine_cls(EngineConfig(model=args.model, max_model_len=4096, block_size=block, dtype=args.dtype))
    # warm up on a long prompt of other text too (the first large prefill of a process is slow)
    warm = [
        [{"role": "user", "content": "warm up"}],
        prompts.verifier_messages("Warm up?", "Warming up the engine. " * 80, "The response is warm.", style=STYLE),
    ]
    engine.chat(warm, max_tokens=2, choices=list(prompts.VERDICT_CHOICES))
    return engine, engine.llm.llm_engine.vllm_config.cache_config.block_size


def interleaved_passes(repeats: int, today: tuple, new: tuple, checks: list[Check]) -> tuple[dict, list, dict]:
    """``repeats`` passes of raw rate, today, new, leaders: (figures per arm and pass, raw rates, verdicts per arm)."""
    passes: dict[str, list[dict]] = {"today": [], "new": [], "leaders": []}
    raw_rates: list[float] = []
    verdicts: dict[str, list] = {}
    for _ in range(repeats):
        # raw rate of this pass: the faster engine's (a smaller ideal, so a stricter ratio)
        raw = max(raw_prefill_rate(today[0], checks), raw_prefill_rate(new[0], checks))
        raw_rates.append(raw)
        for name, run in (
            ("today", lambda: run_verify("today", *today, checks)),
            ("new", lambda: run_verify("new", *new, checks)),
            ("leaders", lambda: run_leaders(*new, checks)),
        ):
            fig, v = run()
            fig["raw_prefill_tokens_per_s"] = raw
            fig["ideal_ms_per_verdict"] = 1000 * fig["unique_prompt_tokens"] / raw / fig["verdicts"]
            fig["cost_over_ideal"] = fig["ms_per_verdict"] / fig["ideal_ms_per_verdict"]
            passes[name].append(fig)
            if verdicts.setdefault(name, v) != v:
                verdicts[name + " (rerun differs)"] = v
    return passes, raw_rates, verdicts


def summary(args, checks, model_name, naive, naive_v, passes, raw_rates, verdicts, per_request, decode) -> dict:
    """The result JSON: each arm's median pass, the ratios, and the new arm's cost split against the ideal."""
    raw_rate = statistics.median(raw_rates)
    # each arm: its median pass (by time); its cost over the ideal is the median of the per-pass ratios
    chosen = {}
    for name, p in passes.items():
        fig = dict(sorted(p, key=lambda f: f["seconds"])[(len(p) - 1) // 2])
        fig["cost_over_ideal"] = statistics.median(f["cost_over_ideal"] for f in p)
        chosen[name] = fig
    naive["raw_prefill_tokens_per_s"] = raw_rate
    naive["ideal_ms_per_verdict"] = 1000 * naive["unique_prompt_tokens"] / raw_rate / naive["verdicts"]
    naive["cost_over_ideal"] = naive["ms_per_verdict"] / naive["ideal_ms_per_verdict"]
    new, today = chosen["new"], chosen["today"]
    ideal_ms = 1000 * new["unique_prompt_tokens"] / raw_rate / new["verdicts"]
    block_ms = 1000 * (new["computed_prompt_tokens"] - new["unique_prompt_tokens"]) / raw_rate / new["verdicts"]
    same = verdicts["today"] == verdicts["leaders"] == verdicts["new"] and not any("rerun" in k for k in verdicts)
    return {
        "model": model_name,
        "checks": len(checks),
        "prompts": args.prompts,
        "responses_per_prompt": args.responses,
        "criteria_per_response": args.criteria,
        "repeats": args.repeats,
        "arms": [naive, chosen["today"], chosen["leaders"], chosen["new"]],
        "all_passes": passes,
        "raw_prefill_tokens_per_s": raw_rate,
        "raw_prefill_tokens_per_s_per_pass": raw_rates,
        "naive_computed_tokens_per_s": naive["computed_prompt_tokens_per_s"],
        "ideal_unique_prefill_ms_per_verdict": ideal_ms,
        "ratio_new_over_today_verdicts_per_s": new["verdicts_per_s"] / today["verdicts_per_s"],
        "ratio_today_over_naive_verdicts_per_s": today["verdicts_per_s"] / naive["verdicts_per_s"],
        "new_cost_over_ideal": new["cost_over_ideal"],
        "today_cost_over_ideal": today["cost_over_ideal"],
        "new_token_floor_over_unique": new["computed_prompt_tokens"] / new["unique_prompt_tokens"],
        "new_block_granularity_ms_per_verdict": block_ms,
        "per_request_ms": {k: 1000 * v for k, v in per_request.items()},
        "new_explained_ms_per_verdict": ideal_ms + block_ms + 1000 * per_request["new"],
        "decode_output_tokens_per_s": decode,
        "same_verdicts_today_leaders_new": same,
        "naive_agrees_with_new": sum(a == b for a, b in zip(naive_v, verdicts["new"])) / len(checks),
        "verdicts": verdicts,
    }


def print_report(result: dict, n_checks: int, repeats: int, n_leaders: int, blocks: tuple[int, int]) -> None:
    """The run in words on stderr: the raw rate, the arms' table, the ratios and the new arm's cost explained."""
    today, new, same = result["arms"][1], result["arms"][3], result["same_verdicts_today_leaders_new"]
    ideal_ms, block_ms = result["ideal_unique_prefill_ms_per_verdict"], result["new_block_granularity_ms_per_verdict"]
    request_ms, decode = result["per_request_ms"], result["decode_output_tokens_per_s"]
    print(
        f"\n{n_checks} verdicts, {repeats} interleaved passes (median); raw prefill "
        f"{result['raw_prefill_tokens_per_s']:.0f} tok/s (cold prefill of the {n_leaders} distinct prefixes, per pass: "
        f"{', '.join(f'{r:.0f}' for r in result['raw_prefill_tokens_per_s_per_pass'])}; the naive arm computed "
        f"{result['naive_computed_tokens_per_s']:.0f} tok/s); ideal {ideal_ms:.0f} ms/verdict (unique tokens at the "
        "raw rate)\n",
        file=sys.stderr,
    )
    print(table(result["arms"]), file=sys.stderr)
    print(
        f"\nnew/today: {result['ratio_new_over_today_verdicts_per_s']:.2f}x verdicts/s; today/naive "
        f"{result['ratio_today_over_naive_verdicts_per_s']:.1f}x; new costs {new['cost_over_ideal']:.2f}x the ideal "
        f"(today {today['cost_over_ideal']:.2f}x); its token floor (computed / unique) is "
        f"{result['new_token_floor_over_unique']:.2f}x.\nnew = ideal {ideal_ms:.0f} + block granularity "
        f"{block_ms:.0f} ({new['computed_prompt_tokens'] - new['unique_prompt_tokens']:,} tokens) + per-request "
        f"{request_ms['new']:.0f} (1-token prompts; today's engine {request_ms['today']:.0f}) = "
        f"{result['new_explained_ms_per_verdict']:.0f} ms explained of {new['ms_per_verdict']:.0f} measured.\n"
        f"decode (4 x 64 tokens): block {blocks[0]} {decode['today']:.1f} tok/s, block {blocks[1]} "
        f"{decode['new']:.1f} tok/s.\nsame verdicts today / leaders / new: {'yes' if same else 'NO'}; naive agrees "
        f"on {result['naive_agrees_with_new']:.0%} (differently worded questions).",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
