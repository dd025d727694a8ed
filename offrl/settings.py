"""The settings of a training run that ``offrl train``, ``sweep``, ``benchmark`` and ``finetune`` share.

:class:`RunSettings` is the one place their defaults and valid ranges are stated; each command
generates its flags from the fields it uses (:func:`offrl.config.add_flags` with ``only=``), so
``--steps 0`` or ``--eval-every -5`` is refused in one line by :func:`offrl.config.check_config`
whichever command receives it. Pure Python (no JAX).

Example::

    settings = RunSettings(steps=50_000, seeds=3)
    run = offrl.train("iql", "pendulum-medium-v0", **settings.train_kwargs())
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from offrl.config import (BOOL, DEVICES, NON_NEGATIVE_INT, POSITIVE_INT, ANY_INT, OrNone, check_config, param)


def parse_devices(text: str) -> int | str:
    """``"auto"`` or a whole number, as typed after ``--devices``."""
    return "auto" if text.strip().lower() == "auto" else int(text)


@dataclass(frozen=True)
class RunSettings:
    """Settings of one training run (the algorithm's own hyperparameters are its ``Config``).

    steps: gradient steps (updates) per seed.
    seeds: independent seeds trained together with vmap.
    seed: base random seed (the seeds are seed, seed+1, ...).
    eval_every: steps between evaluations.
    eval_episodes: episodes per evaluation and seed (0: no evaluation).
    log_every: steps per scanned chunk and metrics row.
    env: Gymnasium id for evaluation (default: the dataset's env_id).
    out: run folder.
    resume: continue the run in --out from its latest checkpoint.
    progress: show a progress bar.
    devices: shard the seeds (one seed: the batch axis) over N devices, data replicated; auto: as many as divide it
      (default: one device).
    tensorboard: also log to TensorBoard (needs tensorboardX).
    wandb: also log to Weights & Biases (needs wandb).
    keep_checkpoints: keep the checkpoint of every evaluation step (default: the latest only); `offrl select RUN`
      then ranks them all.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    steps: int = param(100_000, POSITIVE_INT)
    seeds: int = param(1, POSITIVE_INT)
    seed: int = param(0, ANY_INT)
    eval_every: int = param(10_000, POSITIVE_INT)
    eval_episodes: int = param(10, NON_NEGATIVE_INT)
    log_every: int = param(1000, POSITIVE_INT)
    env: str | None = None
    out: str | None = None
    resume: bool = param(False, BOOL)
    progress: bool = param(True, BOOL)
    devices: int | str | None = param(None, OrNone(DEVICES), parse=parse_devices, flag="--devices")
    tensorboard: bool = param(False, BOOL)
    wandb: bool = param(False, BOOL)
    keep_checkpoints: bool = param(False, BOOL)

    def __post_init__(self) -> None:
        check_config(self)

    def train_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`offrl.engine.train` these settings give."""
        return dataclasses.asdict(self)


__all__ = ["RunSettings", "parse_devices"]
