"""One run of the learning benchmark: its options, its work directory with each phase's cached result, the three
splits, P(0)'s checkpoint and responses C, the frozen verifier, and the result JSON being built."""

from __future__ import annotations

import json
import time
from pathlib import Path

from dr_core.runs.round_steps import spread_ranks
from dr_core.train.grpo import GeneratorRow, GRPOSettings

ROOT = Path(__file__).resolve().parents[3]


def parse_or_render(ap, markdown):
    """A benchmark's arguments, parsed; None when ``--render RESULT.json`` printed a finished result's tables
    (``markdown(result)``) instead. Without --render, ``--output`` is required (argparse's usage error)."""
    args = ap.parse_args()
    if args.render:
        print(markdown(json.loads(args.render.read_text())))
        return None
    if args.output is None:
        ap.error("--output is required")
    return args


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Phases:
    """Each phase's JSON result in the work directory, reused on a rerun."""

    def __init__(self, work: Path):
        self.dir = work / "phases"
        self.dir.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, fn):
        path = self.dir / f"{name}.json"
        if path.exists():
            log(f"{name}: reusing {path}")
            return json.loads(path.read_text())
        value = fn()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, default=float))
        tmp.replace(path)
        return value


class Run:
    """The state the phases share. ``sets`` (C per prompt id), ``base`` (P(0)'s checkpoint) and ``verifier`` (the
    frozen verifier engine) are set as the run reaches them; ``result`` is the JSON written to ``--output``."""

    def __init__(self, args, work: Path, splits: dict[str, list]):
        self.args, self.work = args, work
        self.phases = Phases(work)
        self.splits = splits
        self.train, self.tune, self.held = splits["bench-train"], splits["bench-tune"], splits["bench-heldout"]
        self.base = None
        self.sets: dict[str, list[str]] = {}
        self.verifier = None
        self.result: dict = {}

    def rows_of(self, split, k: int) -> list[GeneratorRow]:
        """The generator's rows of a split: the first ``k`` responses of C, ``--n-anchor`` anchors spread over the
        ranking."""
        return [
            GeneratorRow(
                i,
                r.prompt,
                tuple(self.sets[r.id][:k]),
                tuple(r.responses[j - 1] for j in spread_ranks(len(r.responses), self.args.n_anchor)),
            )
            for i, r in enumerate(split)
        ]

    def settings_of(self, seed: int, setting: dict, steps: int) -> GRPOSettings:
        """The generator update's GRPO settings for one (learning rate, LoRA rank) setting."""
        return GRPOSettings(
            learning_rate=setting["lr"],
            num_generations=self.args.rollouts,
            max_completion_length=128,
            per_device_train_batch_size=self.args.rollouts,
            max_steps=steps,
            save_steps=steps,
            temperature=1.0,
            seed=seed,
            rollouts="vllm",
            use_lora=True,
            lora_r=setting["lora_r"],
            lora_alpha=2 * setting["lora_r"],
        )

    def save(self, partial: bool) -> None:
        out = self.args.output
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.result | {"partial": partial}, indent=2, default=float) + "\n")
