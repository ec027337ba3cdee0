"""One style of hyperparameter validation: jsonargparse's restricted types in the signature.

A method annotates its arguments with types such as ``PositiveFloat`` or ``ClosedUnitInterval``
(re-exported here). From a recipe, LightningCLI refuses a bad value at parse time, naming the key;
from Python, the constructor calls :func:`check_arguments` with its ``locals()``, which applies the
same types and raises one line naming the class, the argument, the value and what is valid:

    def __init__(self, beta: PositiveFloat = 2.5, gamma: NonNegativeFloat = 0.0, ...) -> None:
        check_arguments(SimNPO.__init__, locals())
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
)

__all__ = [
    "ClosedUnitInterval",
    "NonNegativeFloat",
    "NonNegativeInt",
    "OpenUnitInterval",
    "PositiveFloat",
    "PositiveInt",
    "check_arguments",
    "plain_numbers",
]

RESTRICTED = (ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, OpenUnitInterval, PositiveFloat, PositiveInt)
DESCRIPTIONS = {
    ClosedUnitInterval: "a number in [0, 1]",
    NonNegativeFloat: "a number >= 0",
    NonNegativeInt: "an integer >= 0",
    OpenUnitInterval: "a number in (0, 1)",
    PositiveFloat: "a number > 0",
    PositiveInt: "an integer > 0",
}

RESTRICTION_DESCRIPTIONS = {restricted.__name__: text for restricted, text in DESCRIPTIONS.items()}


def _restriction(annotation: Any) -> Any | None:
    """The restricted type in ``annotation`` (also inside ``X | None``), else None."""
    if annotation in RESTRICTED:
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [arg for arg in typing.get_args(annotation) if arg in RESTRICTED]
        return found[0] if found else None
    return None


def check_arguments(function: Callable[..., Any], arguments: Mapping[str, Any]) -> None:
    """Validate ``arguments`` (a constructor's ``locals()``) against the restricted types of ``function``'s
    annotations; the first bad one raises ``ValueError``: ``Class: key=value is invalid, expected ...``."""
    hints = typing.get_type_hints(function)
    # the class being built (a subclass that inherits the constructor), else the one that defines it
    owner = type(arguments["self"]).__name__ if "self" in arguments else function.__qualname__.rsplit(".", 1)[0]
    for name in inspect.signature(function).parameters:
        restricted = _restriction(hints.get(name))
        value = arguments.get(name)
        if restricted is None or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{owner}: {name}={value!r} is invalid, expected {DESCRIPTIONS[restricted]}")
        try:
            restricted(value)
        except ValueError:
            raise ValueError(f"{owner}: {name}={value!r} is invalid, expected {DESCRIPTIONS[restricted]}") from None


def plain_numbers(hparams: MutableMapping[str, Any]) -> None:
    """Turn restricted-type values (``PositiveFloat(0.5)``, as LightningCLI passes them) into plain
    ``float``/``int`` in place, so hparams.yaml and checkpoints hold plain data (``torch.load`` with
    ``weights_only`` refuses unknown classes). Call it after ``save_hyperparameters()``."""
    for key, value in hparams.items():
        if isinstance(value, RESTRICTED):
            hparams[key] = int(value) if isinstance(value, int) else float(value)
