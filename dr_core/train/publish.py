"""Publishing the model of one GRPO update (``dr_core.train.grpo``) and its ``TrainResult``.

The final model (merged when LoRA) and its tokenizer go to ``out_dir/final``, written under a temporary name
(``final.partial``), with ``result.json`` and then the ``.dr-complete`` marker last, and renamed into place; a call
that finds a complete ``out_dir/final`` returns its saved result without training again (``saved_result``). Once
``final`` is in place the resumable checkpoints (``dr_core.train.resume``) are deleted (``keep_resume_checkpoints``
keeps them): for SmolLM2-135M they are 1.6 GB per update. With several processes the main process writes; without
LoRA every rank takes part in the save (it gathers ZeRO-3 shards).

    python -c "from dr_core.train.publish import is_complete; print(is_complete('/tmp'))"
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dr_core.config.training import GRPOSettings
from dr_core.constants import COMPLETE_MARKER
from dr_core.store.atomic import publish_dir
from dr_core.train import lora
from dr_core.train.resume import CHECKPOINTS_DIR

FINAL_DIR = "final"
RESULT_FILE = "result.json"


@dataclass
class TrainResult:
    """What one update produced. ``checkpoint``: the final model directory (with tokenizer and marker).
    ``history``: one dict per reward call of the whole run (resumed parts included). ``reward_first/last``: the
    mean reward of the first and last reward call (generator: R_disc + lam R_anchor; policy: Eq. 12 score of the
    scorable rollouts). ``step_seconds``: training seconds per optimiser step of this call. ``rollout_stats``: with
    ``rollouts="vllm"``, the weight syncs and the seconds spent syncing and generating (dr_core/train/rollouts.py).
    ``trl_log``: TRL's ``log_history`` of the whole run (one dict per logged step under TRL's metric names, resumed
    parts included), what ``--track mlflow`` logs per step (dr_core/runs/tracking.py)."""

    checkpoint: str
    steps: int
    history: list[dict]
    reward_first: float | None
    reward_last: float | None
    seconds: float
    resumed_from: str | None
    step_seconds: float | None = None
    rollout_stats: dict | None = None
    trl_log: list[dict] = field(default_factory=list)
    trl_advantages: list[list[float]] = field(default_factory=list, repr=False)


def result_dict(result: TrainResult) -> dict[str, Any]:
    """The result as plain JSON-able data (without the per-call TRL advantages)."""
    out = asdict(result)
    out.pop("trl_advantages", None)
    return out


def is_complete(path: str | Path) -> bool:
    """True when ``path`` is a finished final model directory (its marker is written last)."""
    return (Path(path) / COMPLETE_MARKER).is_file()


def saved_result(final: Path) -> TrainResult:
    """The result saved with a complete final model."""
    return TrainResult(**json.loads((final / RESULT_FILE).read_text()))


def _partial(out_dir: Path) -> Path:
    return out_dir / f"{FINAL_DIR}.partial"


def save_model(trainer, settings: GRPOSettings, base_checkpoint: str | Path, out_dir: Path) -> None:
    """Save the trained model (LoRA: merged onto the base) to ``out_dir/final.partial``, after removing what an
    earlier call left there."""
    partial = _partial(out_dir)
    main = trainer.accelerator.is_main_process
    if main and partial.exists():
        shutil.rmtree(partial)
    trainer.accelerator.wait_for_everyone()
    if settings.use_lora:
        if main:
            peft_model = trainer.accelerator.unwrap_model(trainer.model)
            if lora.has_bf16_base(peft_model):  # merged onto the float32 base, never onto its bf16 copy
                lora.save_merged(peft_model, base_checkpoint, partial)
            else:
                peft_model.merge_and_unload().save_pretrained(partial)
    else:
        trainer.save_model(str(partial))  # every rank: gathers ZeRO-3 shards


def publish(trainer, tokenizer, result: TrainResult, settings: GRPOSettings, out_dir: Path) -> None:
    """Complete ``out_dir/final.partial`` and rename it to ``out_dir/final``. The tokenizer and ``result.json`` go
    in first, then the marker; the resumable checkpoints are deleted unless the settings keep them."""
    partial = _partial(out_dir)
    main = trainer.accelerator.is_main_process
    if main:
        tokenizer.save_pretrained(partial)
        saved = asdict(result)
        saved["trl_advantages"] = []
        (partial / RESULT_FILE).write_text(json.dumps(saved))
        (partial / COMPLETE_MARKER).write_text(json.dumps({"steps": result.steps}) + "\n")  # last: the model is whole
        publish_dir(partial, out_dir / FINAL_DIR)
    trainer.accelerator.wait_for_everyone()
    if main and not settings.keep_resume_checkpoints:
        shutil.rmtree(out_dir / CHECKPOINTS_DIR, ignore_errors=True)
