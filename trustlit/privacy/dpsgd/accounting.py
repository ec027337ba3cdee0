"""Privacy accounting for DP-SGD: the accountant, the epsilon spent, noise calibration, resumed budgets.

An accountant's ``history`` holds ``(sigma, q, steps)`` triples; epsilon is reported at ``delta``.
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import numpy as np
from opacus.accountants import IAccountant, create_accountant
from opacus.accountants.utils import get_noise_multiplier

AccountantName = Literal["prv", "rdp", "gdp"]
ACCOUNTANTS: tuple[AccountantName, ...] = ("prv", "rdp", "gdp")
BUDGET_TOLERANCE = 1.01  # a resumed run may overshoot target_epsilon by 1 % (the calibration's own slack)


def spent_epsilon(accountant: IAccountant, delta: float) -> float:
    """Epsilon spent so far at ``delta``: 0 before the first step, infinite if a step had no noise."""
    if not accountant.history:
        return 0.0
    if any(sigma == 0 for sigma, _, _ in accountant.history):
        return float("inf")
    return accountant.get_epsilon(delta)


def history_epsilon(accountant: AccountantName, history: list[tuple[float, float, int]], delta: float) -> float:
    """The epsilon at ``delta`` that ``accountant`` gives ``history`` (``(sigma, q, steps)`` triples)."""
    fresh = create_accountant(accountant)
    fresh.history = list(history)
    with np.errstate(divide="ignore"):  # q = 1: Opacus's PRV evaluates log(1 - q) in a branch it then discards
        return fresh.get_epsilon(delta)


def planned_steps(trainer: L.Trainer, sample_rate: float) -> int:
    """Steps the trainer will take: ``max_steps``, else ``max_epochs`` x 1/q steps per epoch."""
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return trainer.max_steps
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        return trainer.max_epochs * round(1 / sample_rate)
    raise ValueError("DPSGD(target_epsilon=...) needs trainer.max_epochs or trainer.max_steps")


def calibrate_noise(
    target_epsilon: float, target_delta: float, sample_rate: float, steps: int, accountant: AccountantName
) -> float:
    """The smallest sigma with which ``steps`` steps at rate ``sample_rate`` spend at most ``target_epsilon``."""
    return get_noise_multiplier(
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        sample_rate=sample_rate,
        steps=steps,
        accountant=accountant,
    )


def check_resumed_budget(
    accountant: AccountantName,
    history: list[tuple[float, float, int]],
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    target_epsilon: float,
    target_delta: float,
) -> None:
    """The noise was calibrated for the first run: refuse a resume to ``steps`` steps that would overspend."""
    remaining = steps - sum(done for _, _, done in history)
    epsilon = history_epsilon(accountant, [*history, (noise_multiplier, sample_rate, max(0, remaining))], target_delta)
    if epsilon > target_epsilon * BUDGET_TOLERANCE:
        raise ValueError(
            f"resuming to {steps} steps would spend epsilon={epsilon:.3f} > target_epsilon="
            f"{target_epsilon}: the noise was calibrated for the original run's length"
        )
