"""Weights & Biases logging that is offline unless the user asks for online.

Lightning's ``WandbLogger(offline=True)`` forces offline whatever ``WANDB_MODE`` says.
:class:`WandbLogger` here decides from the environment when ``offline`` is left unset:
``WANDB_MODE=online`` (or ``run``) logs online, ``WANDB_MODE=disabled`` logs nothing, and
anything else, including no ``WANDB_MODE``, writes an offline run that ``wandb sync`` uploads
later.
"""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

ONLINE_MODES = ("online", "run")


def wandb_offline_from_env() -> bool:
    """Offline unless ``WANDB_MODE`` asks for online (or disables W&B, which wandb handles)."""
    return os.environ.get("WANDB_MODE", "offline") not in (*ONLINE_MODES, "disabled")


class WandbLogger(LightningWandbLogger):
    """Lightning's WandbLogger with ``offline`` defaulting to the ``WANDB_MODE`` environment."""

    def __init__(self, *args: Any, offline: bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, offline=wandb_offline_from_env() if offline is None else offline, **kwargs)
