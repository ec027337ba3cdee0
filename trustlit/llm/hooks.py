"""Forward hooks as context managers: capture, add to, stop at, or replace a module's activation.

Every method that acts inside a network uses these four (LUNAR, RMU, Vaccine, RepNoise,
Attention-Shifting, activation harvesting), so a hook is registered, and removed on exit (also on
error), in one place. A module's *activation* is its output, or its first element when it returns
a tuple (the hidden states of a decoder block or an attention module); with ``inputs=True`` it is
the first positional input instead. Tensors keep their autograd graph unless the caller runs under
``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

Activation = Callable[[torch.Tensor], torch.Tensor]


class StopForward(Exception):
    """Raised by :func:`stop_at` to end a forward once the activations it needs are captured."""


def first_tensor(output: torch.Tensor | tuple) -> torch.Tensor:
    """The activation of a module output: the tensor itself, or a tuple's first element."""
    return output[0] if isinstance(output, tuple) else output


def _with_first(output: torch.Tensor | tuple, value: torch.Tensor) -> torch.Tensor | tuple:
    return (value, *output[1:]) if isinstance(output, tuple) else value


@contextmanager
def _registered(handles: list[torch.utils.hooks.RemovableHandle]) -> Iterator[None]:
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def capture(
    modules: Mapping[str, nn.Module], inputs: bool = False, element: int = 0
) -> Iterator[dict[str, torch.Tensor]]:
    """Record each module's activation (output, or first input with ``inputs``) by name.

    ``element`` picks another element of a tuple output (1: the attention probabilities an eager
    attention module returns). Yields a dict filled as the modules run; a module that runs twice
    keeps its last activation.
    """
    captured: dict[str, torch.Tensor] = {}

    def hook_for(name: str) -> Callable[..., None]:
        if inputs:
            return lambda module, args: captured.__setitem__(name, args[0])
        if element:
            return lambda module, args, output: captured.__setitem__(name, output[element])
        return lambda module, args, output: captured.__setitem__(name, first_tensor(output))

    handles = [
        module.register_forward_pre_hook(hook_for(name)) if inputs else module.register_forward_hook(hook_for(name))
        for name, module in modules.items()
    ]
    with _registered(handles):
        yield captured


@contextmanager
def replace(modules: Sequence[nn.Module], functions: Sequence[Activation]) -> Iterator[None]:
    """Inside, each forward of ``modules[i]`` returns ``functions[i](activation)`` in place of its activation."""

    def hook_for(function: Activation) -> Callable[..., Any]:
        return lambda module, args, output: _with_first(output, function(first_tensor(output)))

    handles = [m.register_forward_hook(hook_for(f)) for m, f in zip(modules, functions, strict=True)]
    with _registered(handles):
        yield


@contextmanager
def add(modules: Sequence[nn.Module], offsets: Sequence[torch.Tensor]) -> Iterator[None]:
    """Inside, each forward of ``modules[i]`` returns its activation plus ``offsets[i]`` (broadcast).

    Gradients flow to an offset that requires them.
    """

    def plus(offset: torch.Tensor) -> Activation:
        return lambda activation: activation + offset.to(activation.dtype)

    with replace(modules, [plus(offset) for offset in offsets]):
        yield


@contextmanager
def stop_at(module: nn.Module, before: bool = False) -> Iterator[None]:
    """End every forward inside at ``module``: before it runs (``before``) or right after it.

    Enter it after :func:`capture` on the same module, so the capture hook runs first, and run the
    forward through :func:`run_until_stopped` (or catch :class:`StopForward`).
    """

    def stop(*_: Any) -> None:
        raise StopForward

    handle = module.register_forward_pre_hook(stop) if before else module.register_forward_hook(stop)
    with _registered([handle]):
        yield


def run_until_stopped(forward: Callable[[], Any], where: str) -> None:
    """Call ``forward`` and swallow the :class:`StopForward` that ends it; a forward that was never
    stopped is an error naming ``where`` it should have stopped (the hook was not reached)."""
    try:
        forward()
    except StopForward:
        return
    raise RuntimeError(f"the forward never reached {where}: the stop hook is not on a module it runs")
