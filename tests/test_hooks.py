"""The forward-hook context managers of trustlit.llm.hooks, each on a tiny model and a hand-made module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers
from trustlit.llm.loading import build_tiny_causal_lm


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = build_tiny_causal_lm(hidden_size=32, num_layers=3, num_heads=2)
    model.eval()
    ids = torch.tensor([tokenizer("Who wrote the book of facts?")["input_ids"]])
    return model, ids


class Pair(nn.Module):
    """Returns a tuple (hidden, extra), as a decoder block or an eager attention module does."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return 2 * x, x + 100


def test_capture_equals_the_hidden_states_and_hooks_are_removed(tiny):
    model, ids = tiny
    blocks = {str(i): layer for i, layer in enumerate(decoder_layers(model))}
    with torch.no_grad():
        model(input_ids=ids, output_hidden_states=True)  # transformers installs hooks of its own on first use
    before = [len(layer._forward_hooks) for layer in blocks.values()]
    with torch.no_grad(), hooks.capture(blocks) as captured:
        output = model(input_ids=ids, output_hidden_states=True)
    for i in range(2):  # the last block's output is before the final norm
        torch.testing.assert_close(captured[str(i)], output.hidden_states[i + 1])
    assert [len(layer._forward_hooks) for layer in blocks.values()] == before


def test_capture_of_inputs_and_of_another_tuple_element():
    module = Pair()
    x = torch.arange(3.0)
    with hooks.capture({"in": module}, inputs=True) as inputs, hooks.capture({"extra": module}, element=1) as extra:
        module(x)
    assert torch.equal(inputs["in"], x)
    assert torch.equal(extra["extra"], x + 100)


def test_add_shifts_the_first_element_only_and_carries_gradients():
    module = Pair()
    offset = torch.zeros(3, requires_grad=True)
    with hooks.add([module], [offset]):
        hidden, extra = module(torch.ones(3))
    assert torch.equal(extra, torch.full((3,), 101.0))
    hidden.sum().backward()
    assert torch.equal(offset.grad, torch.ones(3))
    assert torch.equal(module(torch.ones(3))[0], torch.full((3,), 2.0)), "the offset is gone after the block"


def test_replace_changes_what_later_layers_see(tiny):
    model, ids = tiny
    with torch.no_grad():
        clean = model(input_ids=ids).logits
        with (
            hooks.replace([decoder_layer(model, 1)], [torch.zeros_like]),
            hooks.capture({"next": decoder_layer(model, 2)}, inputs=True) as seen,
        ):
            zeroed = model(input_ids=ids).logits
        unhooked = model(input_ids=ids).logits
    assert torch.count_nonzero(seen["next"]) == 0, "block 2 reads the replaced output of block 1"
    assert not torch.allclose(clean, zeroed)
    torch.testing.assert_close(clean, unhooked)


def test_stop_at_ends_the_forward_before_or_after_a_module(tiny):
    model, ids = tiny
    last = decoder_layer(model, -1)
    ran: list[str] = []
    with torch.no_grad(), hooks.capture({"h": decoder_layer(model, 0)}) as captured, hooks.stop_at(last, before=True):
        recorder = last.register_forward_pre_hook(lambda module, args: ran.append("last block"))  # after the stop
        hooks.run_until_stopped(lambda: model(input_ids=ids), "block 2")
        recorder.remove()
    assert "h" in captured and ran == [], "the capture ran, the stop came before the last block"
    with torch.no_grad(), hooks.capture({"h": last}) as after, hooks.stop_at(last), pytest.raises(hooks.StopForward):
        model(input_ids=ids)
    assert "h" in after, "stopped right after the block, which ran"


def test_a_forward_that_never_reaches_the_stop_is_an_error(tiny):
    model, ids = tiny
    with pytest.raises(RuntimeError, match="the forward never reached block 9"):
        hooks.run_until_stopped(lambda: model(input_ids=ids), "block 9")


def test_hooks_are_removed_on_error():
    module = Pair()
    with pytest.raises(ValueError, match="boom"), hooks.replace([module], [torch.zeros_like]):
        raise ValueError("boom")
    assert not module._forward_hooks
