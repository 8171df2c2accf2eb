"""Script entry point for one GRPO update in one or many processes (``accelerate launch``, DeepSpeed ZeRO-2/3).

Inputs are files, so every process reads the same thing: the rows (JSON lines, ``GeneratorRow`` or ``PolicyRow``
fields), the ``GRPOSettings`` (JSON), and the engines config (``dr_core.config``, YAML/JSON; the generator and
verifier roles). Every process builds its own engines, so on several GPUs use ``kind: openai_http`` engines that
point at one shared vLLM server instead of an in-process vLLM per rank. Rollout records go to
``OUT/rollouts.rank<R>.jsonl`` (one line per rollout), the model to ``OUT/final`` (see ``dr_core.train.grpo``).

    accelerate launch --config_file infra/accelerate/zero2.yaml --num_processes 8 -m dr_core.train.launch policy \\
        --base /ckpt/policy-t0 --rows rows.jsonl --settings settings.json --engines engines.yaml --out /runs/p1
    python -m dr_core.train.launch generator --base ... (one process)

Keep per_device_train_batch_size a multiple of num_generations: each process must score whole groups.
On CPU (tests) DeepSpeed needs ``TORCH_EXTENSIONS_DIR`` set (it compiles a C++ op once; see ``extensions_dir``).

The training task does not call this by hand: with ``CoevolveConfig.launch`` asking for more than one process
(``dr_core.config.training.LaunchSettings``), ``dr_core.train.multi`` writes these input files, runs the command
above and reads the result and every rank's records back. With ``DR_PROGRESS_LINES=1`` (set by that launcher) rank
0 also prints its progress (``dr_core.progress``: the GRPO steps) as ``DR-PROGRESS {json}`` lines, which the
launcher turns back into its own progress.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from dr_core.config.training import GRPOSettings
from dr_core.constants import TRAINED_ROLES
from dr_core.engines.base import Engine
from dr_core.paths import cache_dir
from dr_core.train.grpo import GeneratorRow, PolicyRow, TrainResult, result_dict, train_generator, train_policy


def extensions_dir() -> Path:
    """Where DeepSpeed/torch compile their C++ ops: inside the project's cache, so the compile happens once."""
    path = cache_dir() / "torch_extensions"
    path.mkdir(parents=True, exist_ok=True)
    return path


#: The rollout records of rank R of a launched update: ``OUT/rollouts.rank<R>.jsonl``.
ROLLOUTS_PATTERN = "rollouts.rank{rank}.jsonl"
#: Set to 1 in a rank's environment: rank 0 prints its progress as ``PROGRESS_PREFIX`` + JSON lines.
PROGRESS_ENV = "DR_PROGRESS_LINES"
PROGRESS_PREFIX = "DR-PROGRESS "


def rollouts_path(out: str | Path, rank: int | str) -> Path:
    return Path(out) / ROLLOUTS_PATTERN.format(rank=rank)


def dump_rows(rows, path: str | Path) -> Path:
    """Write ``GeneratorRow`` / ``PolicyRow`` s as the JSON lines ``load_rows`` reads."""
    from dataclasses import asdict

    Path(path).write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows), encoding="utf-8")
    return Path(path)


def load_rows(path: str | Path, role: str) -> list[GeneratorRow] | list[PolicyRow]:
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        d = json.loads(line)
        try:
            if role == "generator":
                rows.append(GeneratorRow(int(d["group_id"]), d["prompt"], tuple(d["candidates"]), tuple(d["anchors"])))
            else:
                rows.append(PolicyRow(int(d["group_id"]), str(d["prompt_id"]), d["prompt"]))
        except KeyError as exc:
            raise ValueError(f"{path}:{n}: a {role} row needs the field {exc}") from None
    return rows


def run(
    role: str, base: str, rows, settings: GRPOSettings, out: str | Path, generator: Engine | None, verifier: Engine
) -> TrainResult:
    """One update; this process's rollout records (of the whole run, also when it resumed or had finished) are
    written to ``out/rollouts.rank<R>.jsonl``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records_path = rollouts_path(out, os.environ.get("RANK", "0"))
    records_path.unlink(missing_ok=True)  # the update hands over every record of the run, resumed parts included

    def write(records: list[dict]) -> None:
        with records_path.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)

    if role == "generator":
        return train_generator(base, rows, verifier, settings, out, on_rollouts=write)
    if generator is None:
        raise ValueError("the policy update needs a generator engine (G(t))")
    return train_policy(base, rows, generator, verifier, settings, out, on_rollouts=write)


class LineSink:
    """A ``dr_core.progress`` sink that prints every event as one ``DR-PROGRESS {json}`` line on stdout. Each line
    is flushed, for the process that launched this one (``dr_core.train.multi.ProgressMirror`` reads them)."""

    def __init__(self, stream=None):
        self.stream = stream

    def _emit(self, event: dict) -> None:
        stream = self.stream or sys.stdout
        stream.write(PROGRESS_PREFIX + json.dumps(event) + "\n")
        stream.flush()

    def start(self, key: int, label: str, total: int | None, unit: str) -> None:
        self._emit({"event": "start", "key": key, "label": label, "total": total, "unit": unit})

    def advance(self, key: int, n: int) -> None:
        self._emit({"event": "advance", "key": key, "n": n})

    def stop(self, key: int) -> None:
        self._emit({"event": "stop", "key": key})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dr_core.train.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=TRAINED_ROLES)
    p.add_argument("--base", required=True, help="checkpoint to start from (Hugging Face directory)")
    p.add_argument("--rows", required=True, help="JSON lines of GeneratorRow / PolicyRow fields")
    p.add_argument("--settings", required=True, help="GRPOSettings as JSON")
    p.add_argument("--out", required=True, help="output dir: checkpoints/, final/, history and rollout records")
    p.add_argument("--engines", help="engines config (YAML/JSON) with the generator and verifier roles")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, engines: tuple[Engine | None, Engine] | None = None) -> TrainResult:
    """CLI body. ``engines`` (generator, verifier) replaces ``--engines`` (tests pass fakes)."""
    args = parse_args(argv)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    if os.environ.get(PROGRESS_ENV) == "1" and os.environ.get("RANK", "0") == "0":
        from dr_core import progress

        progress.set_sink(LineSink())
    settings = GRPOSettings(**json.loads(Path(args.settings).read_text(encoding="utf-8")))
    rows = load_rows(args.rows, args.role)
    if engines is None:
        from dr_core.config import load_engines_config
        from dr_core.engines import make_engine

        if not args.engines:
            raise SystemExit("--engines is required (a YAML/JSON engines config with generator and verifier)")
        cfg = load_engines_config(args.engines)
        engines = (make_engine(cfg.generator) if args.role == "policy" else None, make_engine(cfg.verifier))
    result = run(args.role, args.base, rows, settings, args.out, *engines)
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps({k: v for k, v in result_dict(result).items() if k != "history"}))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
