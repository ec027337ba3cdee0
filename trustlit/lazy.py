"""Package namespaces that import their submodules on first use (PEP 562 module ``__getattr__``).

``import trustlit.unlearning`` (or a recipe naming ``trustlit.unlearning.SimNPO``) then imports only
what is asked for, so the light commands and ``trustlit slurm submit`` stay fast and a family's
heavy dependencies load only when one of its classes is used:

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"trustlit.unlearning.simnpo": ["SimNPO"]})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, from ``{module: [names it defines]}``."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *vars(sys.modules[package])})

    return __getattr__, __dir__, sorted(where)
