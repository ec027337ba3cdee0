"""Architecture-independent access to the blocks of a causal LM (hooks on them: :mod:`trustlit.llm.hooks`).

Methods that act inside the network (RMU's layer activations, LUNAR's MLP down-projection,
Attention-Shifting's attention, Vaccine's and RepNoise's hidden states) find the pieces here,
for Llama-style models (Llama, Qwen2, Mistral: ``model.layers[i].mlp.down_proj``) and GPT-2
(``transformer.h[i].mlp.c_proj``), bare or wrapped by peft.
"""

from __future__ import annotations

from torch import nn


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (``PeftModel.get_base_model``), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of transformer blocks, in order from the embeddings."""
    base = base_model(model)
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    for owner in (decoder, getattr(base, "transformer", None)):
        for name in ("layers", "h"):
            layers = getattr(owner, name, None)
            if isinstance(layers, nn.ModuleList):
                return layers
    raise ValueError(f"{type(base).__name__}: cannot find its decoder layers (model.layers or transformer.h)")


def decoder_layer(model: nn.Module, index: int) -> nn.Module:
    """Block ``index`` (negative counts from the last); an index out of range names the valid ones."""
    layers = decoder_layers(model)
    if not -len(layers) <= index < len(layers):
        raise ValueError(f"layer {index} does not exist: the model has {len(layers)} layers (0..{len(layers) - 1})")
    return layers[index]


def mlp_down_projection(layer: nn.Module) -> nn.Module:
    """The MLP's output projection of a block: ``mlp.down_proj`` (Llama family) or ``mlp.c_proj`` (GPT-2)."""
    mlp = getattr(layer, "mlp", None)
    for name in ("down_proj", "c_proj"):
        if (projection := getattr(mlp, name, None)) is not None:
            return projection
    raise ValueError(f"{type(layer).__name__} has no MLP down-projection (mlp.down_proj or mlp.c_proj)")


def self_attention(layer: nn.Module) -> nn.Module:
    """The self-attention module of a block: ``self_attn`` (Llama family) or ``attn`` (GPT-2)."""
    for name in ("self_attn", "attn"):
        if (attention := getattr(layer, name, None)) is not None:
            return attention
    raise ValueError(f"{type(layer).__name__} has no self-attention module (self_attn or attn)")
