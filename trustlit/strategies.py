"""Which Lightning strategies a method runs under, declared once and checked at setup.

A method (LightningModule or Callback) lists the strategy class names it supports in
``supported_strategies``; :func:`check_strategy` refuses any other with one line naming the
method, the strategy, the supported ones and, where given, why. A subclass of a supported strategy
is supported (``DDPSpawnStrategy`` under ``DDPStrategy``), except DeepSpeed, which owns the
optimiser step that every method here relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

SINGLE_DEVICE = "SingleDeviceStrategy"
DDP = "DDPStrategy"
FSDP2 = "ModelParallelStrategy"
SHARDED = ("FSDPStrategy", FSDP2, "DeepSpeedStrategy")
NEVER = ("DeepSpeedStrategy",)


def is_supported(strategy: object, supported: Sequence[str]) -> bool:
    """Whether ``strategy``'s class, or a class it derives from, is named in ``supported`` (DeepSpeed only by name)."""
    name = type(strategy).__name__
    if name in NEVER:
        return name in supported
    return any(cls.__name__ in supported for cls in type(strategy).__mro__)


def check_strategy(owner: str, strategy: object, supported: Sequence[str], why: str = "") -> None:
    """Raise ``ValueError`` naming ``owner``, the strategy and the supported ones unless it is supported."""
    if is_supported(strategy, supported):
        return
    because = f" ({why})" if why else ""
    raise ValueError(
        f"{owner} does not support the {type(strategy).__name__} strategy{because}; supported: "
        f"{list(supported)} (trainer.strategy)"
    )


class StrategySupport:
    """Mixin for LightningModules: ``supported_strategies`` checked by :meth:`check_strategy`.

    ``sharded_refusal`` says why a sharded strategy is refused (a frozen reference copy, hooks).
    """

    supported_strategies: ClassVar[tuple[str, ...]] = (SINGLE_DEVICE,)
    sharded_refusal: ClassVar[str] = ""

    def check_strategy(self) -> None:
        strategy = self.trainer.strategy  # type: ignore[attr-defined]
        why = self.sharded_refusal if type(strategy).__name__ in SHARDED else ""
        check_strategy(type(self).__name__, strategy, self.supported_strategies, why)
