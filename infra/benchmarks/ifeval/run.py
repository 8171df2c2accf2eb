"""One run of the IFEval benchmark: the protocol, the work directory with each phase's stored result (reused on a
rerun), the three splits and their audit, the models' checkpoints, the engines the phases open, and the result JSON
being built."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from dr_core.config import engine_config
from dr_core.ifeval import testbed
from dr_core.store import sql
from dr_core.store.artifacts import Store
from infra.benchmarks.ifeval.protocol import Protocol
from infra.benchmarks.learning.run import Phases, log

PROTOCOL_FILE = Path(__file__).with_name("protocol.py")
#: Each version's protocol file, whose SHA-256 a result records (version 2's builds on version 1's).
PROTOCOL_FILES = {1: PROTOCOL_FILE, 2: Path(__file__).with_name("protocol_v2.py")}
ROOT = Path(__file__).resolve().parents[3]


def checkpoint(word: str) -> Path:
    """A model word of the protocol (a bundled model's name) or a checkpoint directory, as a local directory."""
    from dr_core.model import is_bundled, prepare

    if is_bundled(word):
        return Path(prepare(word, log))
    path = Path(word).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise SystemExit(f"{word}: neither a bundled model nor a Hugging Face checkpoint directory")
    return path


class Run:
    """What the phases share: ``p`` (the protocol), ``work`` (the work directory), ``train`` / ``tune`` / ``held``
    (testbed.Prompt lists), the checkpoints of P(0), G(0) and the verifier, and ``result``."""

    def __init__(self, protocol: Protocol, work: Path, output: Path, models: dict[str, str] | None = None):
        self.p, self.work, self.output = protocol, work, output
        self.phases = Phases(work)
        version = getattr(protocol, "version", 1)
        self.train = testbed.split("train")[: protocol.train_limit]
        self.tune = testbed.split("tune")[: protocol.tune_limit]
        self.held = testbed.heldout(protocol.heldout, start=getattr(protocol, "heldout_offset", 0))
        words = {"policy": protocol.policy_model, "generator": protocol.generator_model}
        words["verifier"] = protocol.verifier_model
        words |= models or {}
        self.models = {role: checkpoint(w) for role, w in words.items()}
        self.result: dict = {
            "benchmark": "ifeval",
            "version": version,
            "protocol": asdict(protocol),
            "protocol_sha256": hashlib.sha256(PROTOCOL_FILES[version].read_bytes()).hexdigest(),
            "protocol_files": {
                f.name: hashlib.sha256(f.read_bytes()).hexdigest() for v, f in PROTOCOL_FILES.items() if v <= version
            },
            "models": {role: str(path) for role, path in self.models.items()},
            "args": {"heldout": len(self.held), "train": len(self.train), "tune": len(self.tune)},
        }

    def grpo_settings(self, seed: int, steps: int, **fields):
        """An update's GRPO settings: what every update of the protocol shares (in-process vLLM rollouts, LoRA, the
        rollout temperature, beta, the lines rubric format), its seed and steps, and ``fields``."""
        from dr_core.train.grpo import GRPOSettings

        p = self.p
        shared = dict(rollouts="vllm", use_lora=True, lora_r=p.lora_r, lora_alpha=2 * p.lora_r, rubric_format="lines")
        shared |= dict(beta=p.beta, temperature=p.temperature, seed=seed, max_steps=steps, save_steps=steps)
        return GRPOSettings(**shared, **fields)

    def verifier_config(self):
        """The frozen verifier: the tiny preset's procedure (plain prompt, balanced verdicts) on the verifier model."""
        return engine_config(
            model=str(self.models["verifier"]), verifier_prompt="plain", verdict_mode="balanced", max_model_len=4096
        )

    def audit(self) -> int:
        """The three splits written to a store's prompts table; ``sql/split_overlap`` must find no prompt shared by
        any two of them (by text or id), else the run stops. Returns the overlapping rows (0)."""
        store = Store.from_url(str(self.work / "store"))
        splits = {"ifeval-train": self.train, "ifeval-tune": self.tune, "ifeval-heldout": self.held}
        for name, split in splits.items():
            rows = [{"prompt_id": p.row.id, "prompt": p.row.prompt, "baseline": None} for p in split]
            store.write("prompts", rows, dataset=name)
        overlap = 0
        for a, b in (
            ("ifeval-heldout", "ifeval-train"),
            ("ifeval-heldout", "ifeval-tune"),
            ("ifeval-tune", "ifeval-train"),
        ):
            rows = sql.run(store.connect(), "split_overlap", {"heldout": a, "train": b})
            overlap += rows.num_rows
            if rows.num_rows:
                raise SystemExit(f"{a} overlaps {b}: {rows.to_pylist()[:3]}")
        log(
            f"audit split_overlap: no overlap (train {len(self.train)}, tune {len(self.tune)}, "
            f"held-out {len(self.held)})"
        )
        return overlap

    def save(self, partial: bool) -> None:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.output.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result | {"partial": partial}, indent=2, default=float) + "\n")
        tmp.replace(self.output)
