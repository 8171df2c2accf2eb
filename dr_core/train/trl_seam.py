"""The seam between ``dr_core.train.trainer`` and TRL: the methods of TRL's ``GRPOTrainer`` that the trainer
overrides or calls although TRL does not offer them for that, the parameter lists they were written against, and
``check_trl_seam``, run where the trainer class is built (``trainer.grpo_trainer_class``).

No public extension point of TRL 1.16 does their work: ``rollout_func`` replaces the generation only (the vLLM
rollouts use it, ``dr_core.train.rollouts``), reward functions run before the advantages exist, and callbacks see
neither the batch, the advantages nor the log-probabilities. So a TRL version other than ``SUPPORTED_TRL`` is refused
with one line (``DR_ALLOW_TRL=1`` tries it anyway), and on every version each method must still take the parameters
recorded in ``SEAMS``: a changed private method stops the trainer from being built instead of silently changing
the training.

TRL is imported inside the functions: importing this module loads none of it.

    python -c "from dr_core.train.trl_seam import check_trl_seam; check_trl_seam()"
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

from dr_core.errors import DRError

#: The TRL versions the seam was written against and checked on (pyproject.toml pins trl==1.16.0).
SUPPORTED_TRL: tuple[str, ...] = ("1.16.0",)
#: Set to 1 to build the trainer on another TRL version; the parameter lists are still checked.
ALLOW_ENV = "DR_ALLOW_TRL"
#: Where the supported pin is installed from.
PIN_SOURCE = "infra/requirements-cpu.txt"


class TrainerSeamError(DRError, RuntimeError):
    """The installed TRL is not the one the trainer's overrides were written against; the message says what to do."""


@dataclass(frozen=True)
class Seam:
    """One method of ``trl.GRPOTrainer`` that the trainer ``use``s ("overrides" or "calls"). Looked up through the
    class's bases; ``params``: the parameter names of ``inspect.signature`` in TRL 1.16.0, ``self`` first."""

    method: str
    use: str
    params: tuple[str, ...]
    defined_by: str  # the class that defines it in TRL 1.16.0 (for the messages)

    @property
    def name(self) -> str:
        return f"{self.defined_by}.{self.method}"


#: Every method of TRL's GRPOTrainer that dynamicrubric's trainer overrides (``trainer._Recording``) or calls
#: without TRL offering it (``grpo._load_finished_checkpoint``).
SEAMS: tuple[Seam, ...] = (
    Seam("training_step", "overrides", ("self", "model", "inputs", "num_items_in_batch"), "GRPOTrainer"),
    Seam(
        "_get_per_token_logps_and_entropies",
        "overrides",
        (
            "self",
            "model",
            "input_ids",
            "attention_mask",
            "logits_to_keep",
            "batch_size",
            "compute_entropy",
            "compute_aux_loss",
            "pixel_values",
            "image_grid_thw",
            "num_images",
            "pixel_attention_mask",
            "spatial_shapes",
            "num_tiles",
            "image_sizes",
            "token_type_ids",
            "mm_token_type_ids",
            "image_position_ids",
        ),
        "GRPOTrainer",
    ),
    Seam("_generate_and_score_completions", "overrides", ("self", "inputs"), "GRPOTrainer"),
    Seam("_load_from_checkpoint", "calls", ("self", "resume_from_checkpoint", "model"), "Trainer"),
)


def _uses() -> str:
    """'overrides A, B and calls C'."""
    parts = []
    for use in ("overrides", "calls"):
        names = [s.name for s in SEAMS if s.use == use]
        if names:
            parts.append(f"{use} {', '.join(names)}")
    return " and ".join(parts)


def _fix() -> str:
    return f"install trl=={SUPPORTED_TRL[-1]} ({PIN_SOURCE})"


def parameters(parent: type, method: str) -> tuple[str, ...] | None:
    """The parameter names of ``parent.method`` (through its bases), ``self`` first; None when it has none."""
    fn = getattr(parent, method, None)
    return None if fn is None else tuple(inspect.signature(fn).parameters)


def check_trl_seam(added: tuple[str, ...] = ()) -> None:
    """Raise ``TrainerSeamError`` (one line) unless the installed TRL fits the trainer's seam. It fits when its version
    is in ``SUPPORTED_TRL`` (or ``DR_ALLOW_TRL=1``) and each method of ``SEAMS`` still exists on ``trl.GRPOTrainer``
    with the recorded parameter names; ``added``: the names the trainer adds to GRPOTrainer, which TRL must not have (a
    TRL method of that name would be shadowed)."""
    import trl
    from trl import GRPOTrainer

    version = trl.__version__
    if version not in SUPPORTED_TRL and os.environ.get(ALLOW_ENV) != "1":
        raise TrainerSeamError(
            f"TRL {version} is not supported by dynamicrubric's trainer (it {_uses()}, written against TRL "
            f"{', '.join(SUPPORTED_TRL)}); {_fix()} or set {ALLOW_ENV}=1 to try it"
        )
    for seam in SEAMS:
        found = parameters(GRPOTrainer, seam.method)
        if found is None:
            raise TrainerSeamError(
                f"TRL {version}'s GRPOTrainer has no {seam.method}, which dynamicrubric's trainer {seam.use} "
                f"({seam.name} of TRL {SUPPORTED_TRL[-1]}); {_fix()}"
            )
        if found != seam.params:
            raise TrainerSeamError(
                f"TRL {version}'s GRPOTrainer.{seam.method} takes ({', '.join(found)}), but dynamicrubric's trainer "
                f"{seam.use} it as ({', '.join(seam.params)}) of TRL {SUPPORTED_TRL[-1]}; {_fix()}"
            )
    clashes = [name for name in added if hasattr(GRPOTrainer, name)]
    if clashes:
        raise TrainerSeamError(
            f"TRL {version}'s GRPOTrainer now has {', '.join(clashes)}, which dynamicrubric's trainer adds and would "
            f"shadow; {_fix()}"
        )
