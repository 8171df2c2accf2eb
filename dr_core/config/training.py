"""The GRPO hyper-parameters of one update (``GRPOSettings``) and how its processes are started
(``LaunchSettings``): plain pydantic models, no trl/peft/torch, so loading a config (``dr_core.config``) does not
load the trainer glue (``dr_core.train.grpo``) or the launcher (``dr_core.train.multi``).

    python -c "from dr_core.config.training import GRPOSettings, LaunchSettings as L; print(GRPOSettings(), L())"
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class GRPOSettings(BaseModel):
    """GRPO hyper-parameters for one update (generator or policy). Defaults: appendix D where it applies (beta,
    K=8), sized down for small models otherwise. Frozen: a value that can go into cache keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    learning_rate: float = Field(5e-6, gt=0, description="AdamW learning rate (paper: 5e-6 generator, 1e-6 policy).")
    beta: float = Field(0.01, ge=0, description="KL coefficient against the reference (start) model (paper: 0.01).")
    num_generations: int = Field(
        8, ge=2, description="Rollouts per prompt: G rubrics per set (generator), K responses per prompt (policy)."
    )
    max_completion_length: int = Field(256, ge=1, description="Most tokens per rollout (a rubric or a response).")
    per_device_train_batch_size: int = Field(
        8,
        ge=1,
        description="Completions per process per optimiser micro-step. x steps_per_generation must be a "
        "multiple of num_generations, so that every process scores whole groups.",
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-steps per optimiser step.")
    steps_per_generation: int | None = Field(
        None, ge=1, description="Micro-steps served by one generation round (None: gradient_accumulation_steps)."
    )
    max_steps: int = Field(10, ge=1, description="Optimiser steps of this update.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    seed: int = Field(0, description="Seeds TRL, the candidate shuffle shown to the generator and G(t)'s sampling.")
    save_steps: int = Field(50, ge=1, description="Save a resumable checkpoint every this many optimiser steps.")
    save_total_limit: int | None = Field(2, ge=1, description="Resumable checkpoints kept (None: all).")
    keep_resume_checkpoints: bool = Field(
        False,
        description="Keep out_dir/checkpoints once the final model is saved (model + optimiser state: about "
        "3x the model's size; only a crash before the final save needs them).",
    )
    lam: float = Field(1.0, ge=0, description="Eq. 17 / 24: weight of the anchor advantage (generator only).")
    use_lora: bool = Field(False, description="Train a LoRA adapter (merged into the final checkpoint).")
    lora_r: int = Field(16, ge=1, description="LoRA rank (use_lora only).")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (use_lora only).")
    bf16: bool = Field(
        "auto",
        validate_default=True,
        description="bf16 mixed precision: float32 master weights and optimiser state, bf16 matmuls under autocast "
        "(TRL/accelerate bf16=True; on CPU with use_cpu). 'auto' (the default) is resolved when the settings are "
        "built (dr_core/config/numerics.py): True on a CUDA machine or a CPU with bf16 instructions (avx512_bf16, "
        "amx_bf16: "
        "a forward plus backward pass measured 1.76x faster there), False on any other CPU (bf16 emulated: 3-8x "
        "slower). The rollout engine (rollouts='vllm') runs in float32 either way (dr_core/train/rollouts.py: a "
        "bf16 engine rounds a small update away).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in the backward pass instead of keeping them (TRL's GRPO default "
        "is True): less memory for one more forward pass per step. Off for the small CPU models, where the "
        "activations fit and the recomputation only costs time; on for the paper preset's 8B models.",
    )
    deepspeed: str | None = Field(
        None,
        description="Path of a DeepSpeed JSON config (infra/deepspeed/*.json), or None. Under `accelerate "
        "launch --config_file infra/accelerate/zero*.yaml` accelerate supplies it instead.",
    )
    rubric_temperature: float = Field(
        0.7, ge=0, description="Policy update only: sampling temperature of the fixed G(t) writing a group's rubric."
    )
    rubric_max_tokens: int = Field(512, ge=16, description="Policy update only: most tokens of G(t)'s rubric.")
    rubric_format: Literal["lines", "json"] = Field(
        "lines",
        description="How rubrics are written. Generator update: how its rollouts write them. 'lines': one '[w] "
        "criterion' per line, the rollout primed with prompts.LINES_ROLLOUT_PREFIX (a 135M model writes parseable "
        "lines, not free JSON); 'json': the JSON format of the structured-output prompt, unprimed (capable models). "
        "Policy update: the format the fixed G(t) is asked in for the reward, which must be the one G(t) was trained "
        "in ('lines': the same primed prompt, unconstrained; 'json': grammar-constrained JSON); dr coevolve sets it "
        "to the generator's.",
    )
    logging_steps: int = Field(1, ge=1, description="TRL logs metrics every this many steps.")
    rollouts: Literal["trl", "vllm"] = Field(
        "trl",
        description="Who samples the rollouts. 'trl': TRL itself (transformers' generate, or TRL's own vLLM "
        "modes on GPUs). 'vllm': an in-process vLLM engine that gets the trainer's weights at every optimiser step "
        "(dr_core/train/rollouts.py; one process; several times faster on CPU, where TRL's vLLM modes fail).",
    )

    @field_validator("bf16", mode="before")
    @classmethod
    def _resolve_bf16(cls, v):
        if v == "auto":
            from dr_core.config.numerics import native_bf16

            return native_bf16()
        return v

    @model_validator(mode="after")
    def _whole_groups(self):
        per_generation = self.per_device_train_batch_size * (
            self.steps_per_generation or self.gradient_accumulation_steps
        )
        if per_generation % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x steps_per_generation = {per_generation} is not a multiple of "
                f"num_generations = {self.num_generations}: a process would score a split group. Make "
                "per_device_train_batch_size a multiple of num_generations."
            )
        if self.rollouts == "vllm" and self.deepspeed is not None:
            raise ValueError(
                "rollouts='vllm' runs one in-process engine: it does not combine with DeepSpeed "
                "(use TRL's vLLM server mode on several GPUs)"
            )
        if self.deepspeed is not None and not Path(self.deepspeed).is_file():
            raise ValueError(f"deepspeed config {self.deepspeed!r} does not exist (see infra/deepspeed/)")
        return self


#: DeepSpeed's multi-node launchers as accelerate 1.15 names them (``--deepspeed_multinode_launcher``). With every one
#: but "standard" and "nossh", ONE ``accelerate launch`` on the head machine starts the ranks of every machine
#: (through pdsh/ssh, MPI or srun) from a DeepSpeed hostfile; "standard" (torchrun) and "nossh" start one machine's
#: ranks, so every machine runs the command itself with its own ``--machine_rank``.
MultinodeLauncher = Literal["pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm"]
#: The launchers that start every machine from the head (they read the hostfile).
HEAD_LAUNCHERS = frozenset({"pdsh", "openmpi", "mvapich", "mpich", "slurm"})
#: Variables the launchers set per rank: a config that sets them would break the rendezvous.
RANK_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "GROUP_RANK",
        "CROSS_RANK",
        "CROSS_SIZE",
    }
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LaunchSettings(BaseModel):
    """How the processes of a GRPO update are started: in the calling process, or by ``accelerate launch`` on one
    or several machines (``dr_core.train.multi`` builds the command). One config, three shapes:

    1. One CPU process, in-process (the default; laptops, CI, the tiny preset): no ``accelerate``, the rewards use
       the step's own engines (``tasks.runtime.engine_for``)::

           launch: {}

    2. N GPUs (or N CPU processes) on one machine, DeepSpeed ZeRO-2 or ZeRO-3::

           launch: {num_processes: 8, config_file: infra/accelerate/zero3.yaml}

    3. M machines, ZeRO-3, one ``accelerate launch`` on the head starting every machine's ranks through pdsh/ssh
       (a DeepSpeed hostfile: one ``host slots=GPUS`` line per machine)::

           launch:
             num_processes: 16          # in all: 8 per machine
             num_machines: 2
             config_file: infra/accelerate/zero3-multinode.yaml
             hostfile: /shared/hostfile # or deepspeed_hostfile in the accelerate config
             main_process_ip: 10.0.0.1  # the head, as the other machines reach it
             main_process_port: 29500

    With more than one process every rank builds its own reward engines from the role's ``EngineConfig``: point
    them at shared servers (``kind: openai_http``) rather than loading a vLLM engine per rank, and give a key through
    ``api_key_env`` (the ranks read it from their environment; an inline ``api_key`` is refused, see
    ``dr_core.train.multi``). On several machines the repository, the Python environment and the cache directory
    (``$DR_CACHE_DIR``: the update's inputs, checkpoints and rollout records) must be at the same paths on every
    machine, the cache on a filesystem they share. Frozen: it is part of the run's config (and so of the training
    step's cache key: the number of processes changes the update)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_processes: int = Field(
        1,
        ge=1,
        description="Training processes in all, over every machine (accelerate's --num_processes): one per "
        "GPU. 1 with num_machines 1 and no config_file: train in the calling process.",
    )
    num_machines: int = Field(
        1, ge=1, description="Machines (accelerate's --num_machines); num_processes is split evenly over them."
    )
    config_file: str | None = Field(
        None,
        description="accelerate config (YAML; relative to the repository root): infra/accelerate/zero2.yaml, "
        "zero3.yaml (one machine), zero3-multinode.yaml (several). None: train in the calling process (then "
        "num_processes and num_machines must be 1). Its num_processes, num_machines and machine_rank are overridden "
        "by the fields here.",
    )
    main_process_ip: str | None = Field(
        None,
        description="Address of the machine of rank 0 as the others reach it (--main_process_ip). Needed with "
        "several machines and the 'standard' or 'nossh' launcher; pdsh defaults to the hostfile's first host.",
    )
    main_process_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Rendezvous port on the rank-0 machine (--main_process_port). None: "
        "accelerate's default (29500; on one machine it moves to a free port if that one is taken); 0: a free port "
        "(one machine only).",
    )
    machine_rank: int = Field(
        0,
        ge=0,
        description="Rank of the machine this step runs on (--machine_rank): 0, the head. Only the "
        "'standard' and 'nossh' launchers use it: the other machines then run the same command with their own rank.",
    )
    multinode_launcher: MultinodeLauncher | None = Field(
        None,
        description="DeepSpeed's multi-node launcher (--deepspeed_multinode_launcher), several machines only. "
        "None: the accelerate config's deepspeed_multinode_launcher, else 'pdsh' (ssh from the head to every host of "
        "the hostfile, so ONE launch starts every machine). 'standard' / 'nossh': this step starts its own machine's "
        "ranks only and the others must run the same command (it is printed) with their machine_rank.",
    )
    hostfile: str | None = Field(
        None,
        description="DeepSpeed hostfile (--deepspeed_hostfile; relative to the repository root): one "
        "'hostname slots=N' line per machine (infra/accelerate/hostfile.example). None: the accelerate config's "
        "deepspeed_hostfile. Needed by the head launchers (pdsh, openmpi, mvapich, mpich, slurm).",
    )
    env: tuple[tuple[str, str], ...] = Field(
        (),
        description="Extra environment variables for the training processes, a mapping (e.g. {NCCL_SOCKET_IFNAME: "
        "eth0}; kept as sorted (name, value) pairs, so the config stays hashable). Recorded with the config: never "
        "put a secret here (use the engines' api_key_env).",
    )
    withhold_env: tuple[str, ...] = Field(
        ("AWS_*", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "PREFECT_API_KEY"),
        description="fnmatch patterns of variables of this process's environment that the training processes do "
        "not get: the store's and the hub's credentials, which training never needs (a pdsh launch writes its "
        "environment to a file and sends it to every machine). An engine's api_key_env is always passed.",
    )
    timeout_s: float = Field(
        24 * 3600.0,
        gt=0,
        description="Wall-clock limit of one launch, seconds; then its processes are stopped "
        "(SIGTERM, SIGKILL 30 s later) and the step fails (Prefect retries it once; it resumes from the last "
        "checkpoint).",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _env_pairs(cls, v):
        if isinstance(v, dict):
            return tuple(sorted((str(k), str(val)) for k, val in v.items()))
        return v

    @property
    def in_process(self) -> bool:
        """True when the update runs in the calling process (no ``accelerate launch``)."""
        return self.config_file is None and self.num_processes == 1 and self.num_machines == 1

    @model_validator(mode="after")
    def _check(self):
        if self.config_file is None and not self.in_process:
            raise ValueError(
                f"launch.num_processes = {self.num_processes}, launch.num_machines = {self.num_machines} need "
                "launch.config_file, an accelerate config (e.g. infra/accelerate/zero2.yaml; several machines: "
                "infra/accelerate/zero3-multinode.yaml)"
            )
        if self.num_processes % self.num_machines:
            raise ValueError(
                f"launch.num_processes = {self.num_processes} is not a multiple of launch.num_machines = "
                f"{self.num_machines}: every machine runs num_processes / num_machines ranks"
            )
        if self.machine_rank >= self.num_machines:
            raise ValueError(
                f"launch.machine_rank = {self.machine_rank} must be below launch.num_machines = {self.num_machines}"
            )
        if self.num_machines > 1:
            if self.multinode_launcher in ("standard", "nossh") and not self.main_process_ip:
                raise ValueError(
                    f"launch.multinode_launcher = {self.multinode_launcher!r} needs "
                    "launch.main_process_ip: the address of the rank-0 machine"
                )
            if self.main_process_port == 0:
                raise ValueError(
                    "launch.main_process_port = 0 (a free port) works on one machine only: give the "
                    "port the other machines connect to"
                )
        elif self.multinode_launcher is not None or self.hostfile is not None:
            raise ValueError(
                "launch.multinode_launcher and launch.hostfile are for several machines: set "
                "launch.num_machines or remove them"
            )
        for name, _value in self.env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"launch.env: {name!r} is not an environment variable name")
            if name in RANK_ENV:
                raise ValueError(f"launch.env: {name} is set by the launcher for every rank; remove it")
        return self
