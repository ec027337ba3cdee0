"""Games over player masks: the ``ValueFunction`` protocol, a memoising counter, and the tabular and token maskers.

A game is a callable ``value(masks) -> Tensor[B]`` on ``masks: BoolTensor[B, n]`` (True = player present) with an
attribute ``n_players``. Estimators wrap it in :class:`CountingValue`, which memoises masks and counts the distinct
coalitions evaluated, the cost every estimator reports.

- :class:`TabularValue`, the baseline game v(S) = E_b[f(x_S, b_{~S})]: absent features take the background's
  values (one row, e.g. column means, or the average of the prediction over a background set of rows).
- :class:`TokenValue`, v(S) = log p(target | context_S): the context with absent players (words, sentences or
  tokens) removed or replaced by the pad token.

Notes: docs/methods/kernel_shap.md
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import evaluating, model_device, sequence_logprobs_from_logits


@runtime_checkable
class ValueFunction(Protocol):
    """A cooperative game: ``value(masks: BoolTensor[B, n]) -> Tensor[B]``, with ``n_players = n``."""

    n_players: int

    def __call__(self, masks: torch.Tensor) -> torch.Tensor: ...


def check_masks(masks: torch.Tensor, n_players: int) -> torch.Tensor:
    """``masks`` as a bool tensor [B, n_players]; a one-line error otherwise."""
    if masks.dim() != 2 or masks.size(1) != n_players:
        raise ValueError(f"masks have shape {tuple(masks.shape)}: expected [B, {n_players}] (one column per player)")
    return masks.bool()


def check_values(values: Any, batch: int, source: str) -> torch.Tensor:
    """A value function's output as a float64 tensor [batch]; a one-line error otherwise."""
    values = torch.as_tensor(np.asarray(values) if not isinstance(values, torch.Tensor) else values)
    if values.shape != (batch,):
        raise ValueError(f"{source} returned shape {tuple(values.shape)} for {batch} masks: expected ({batch},)")
    return values.detach().to(torch.float64).cpu()


class CountingValue:
    """A game with memoised masks, batched calls and ``n_evaluations``, the number of distinct masks evaluated.

    ``value`` is called on at most ``batch_size`` new masks at a time; repeated masks (within a call or across
    calls) are served from the cache.
    """

    def __init__(self, value: ValueFunction, batch_size: int = 1024) -> None:
        if not hasattr(value, "n_players"):
            raise TypeError(f"{type(value).__name__} has no n_players: a value function needs one (ValueFunction)")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: expected a positive integer")
        self.value = value
        self.n_players = int(value.n_players)
        self.batch_size = batch_size
        self.cache: dict[bytes, float] = {}

    @property
    def n_evaluations(self) -> int:
        return len(self.cache)

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        masks = check_masks(torch.as_tensor(masks), self.n_players).cpu()
        keys = [row.tobytes() for row in np.packbits(masks.numpy(), axis=1)]
        new: dict[bytes, int] = {}
        for row, key in enumerate(keys):
            if key not in self.cache and key not in new:
                new[key] = row
        rows = list(new.values())
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            out = check_values(self.value(masks[chunk]), len(chunk), type(self.value).__name__)
            for row, v in zip(chunk, out.tolist(), strict=True):
                self.cache[keys[row]] = v
        return torch.tensor([self.cache[key] for key in keys], dtype=torch.float64)


class TabularValue:
    """The baseline game of one input ``x`` [n]: v(S) = mean_k f(x_S, b^(k)_{~S}) over background rows b^(k).

    ``background`` is one row [n] (e.g. column means: the baseline-Shapley / interventional game of a single
    reference) or a set of rows [K, n] (the interventional game averaged over K references). ``predict_fn`` maps
    rows [N, n] to predictions [N] and receives the type ``x`` came in (numpy array or torch tensor).
    """

    def __init__(self, predict_fn: Callable[[Any], Any], x: Any, background: Any) -> None:
        self.numpy = not isinstance(x, torch.Tensor)
        self.x = torch.as_tensor(np.asarray(x) if self.numpy else x)
        background = torch.as_tensor(np.asarray(background) if self.numpy else background)
        if self.x.dim() != 1:
            raise ValueError(f"x has shape {tuple(self.x.shape)}: expected one row [n_features]")
        if background.dim() == 1:
            background = background.unsqueeze(0)
        if background.dim() != 2 or background.size(1) != self.x.numel():
            raise ValueError(
                f"background has shape {tuple(background.shape)}: expected [{self.x.numel()}] or [K, {self.x.numel()}]"
            )
        self.background = background.to(self.x.dtype)
        self.predict_fn = predict_fn
        self.n_players = self.x.numel()

    def null_players(self) -> torch.Tensor:
        """Features equal to every background row's value [n] (bool): null players, whose Shapley value is 0."""
        return (self.background == self.x[None, :]).all(dim=0)

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        masks = check_masks(torch.as_tensor(masks), self.n_players).cpu()
        batch, n_background = masks.size(0), self.background.size(0)
        rows = torch.where(masks[:, None, :], self.x[None, None, :], self.background[None, :, :])
        rows = rows.reshape(batch * n_background, self.n_players)
        pred = self.predict_fn(rows.numpy() if self.numpy else rows)
        pred = check_values(np.ravel(pred) if self.numpy else pred.reshape(-1), batch * n_background, "predict_fn")
        return pred.view(batch, n_background).mean(dim=1)


class RestrictedValue:
    """``value`` played by ``players`` only (indices into its n players), every other player absent.

    When the others are null players (v(S + i) = v(S) for all S, e.g. :meth:`TabularValue.null_players`: features whose
    value equals the background's), the Shapley values of the restriction are those of ``value`` on ``players`` and
    0 elsewhere (:meth:`expand`), at a fraction of the cost: shap's KernelExplainer does the same with its "varying"
    features.
    """

    def __init__(self, value: ValueFunction, players: Sequence[int]) -> None:
        self.value, self.n_full = value, int(value.n_players)
        self.players = torch.as_tensor(list(players), dtype=torch.long)
        if self.players.numel() == 0 or self.players.unique().numel() != self.players.numel():
            raise ValueError(f"players={list(players)}: expected distinct player indices, at least one")
        if int(self.players.min()) < 0 or int(self.players.max()) >= self.n_full:
            raise ValueError(f"players={list(players)}: indices must lie in [0, {self.n_full})")
        self.n_players = self.players.numel()

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        masks = check_masks(torch.as_tensor(masks), self.n_players)
        full = torch.zeros(masks.size(0), self.n_full, dtype=torch.bool)
        full[:, self.players] = masks.cpu()
        return self.value(full)

    def expand(self, values: torch.Tensor) -> torch.Tensor:
        """Per-player values of the restriction [n_players] as values of the full game [n] (0 off ``players``)."""
        full = torch.zeros(self.n_full, dtype=values.dtype)
        full[self.players] = values
        return full


def player_spans(text: str, players: str) -> list[tuple[int, int]]:
    """Character spans of the players of ``text``: whitespace-separated words, sentences, or (for tokens) none."""
    if players == "words":
        pattern = r"\S+"
    elif players == "sentences":
        pattern = r"[^.!?]*[.!?]+|[^.!?]+$"
    else:
        raise ValueError(f"players={players!r}: valid are 'words', 'sentences', 'tokens'")
    return [(m.start(), m.end()) for m in re.finditer(pattern, text) if m.group().strip()]


class TokenValue:
    """v(S) = sum_t log p(y_t | context_S, y_<t): the log-probability of ``target`` after the context with the
    players outside S removed (``mode="remove"``) or their tokens replaced by the pad token (``mode="pad"``).

    The context is tokenized once; each token belongs to the player whose character span it overlaps (tokens
    outside every player, e.g. whitespace between words, stay in all coalitions). The target is tokenized alone
    and appended. Every input starts with ``prefix_ids`` (default: the BOS token, if the tokenizer has one) and
    has ``suffix_ids`` between the context and the target: a prompt template's parts, present in every coalition
    (``trustlit.interpret.tracing.prompt_parts`` splits a chat or plain QA template so).
    """

    def __init__(
        self,
        causal_lm: torch.nn.Module,
        tokenizer: Any,
        context: str,
        target: str,
        mode: Literal["remove", "pad"] = "remove",
        players: Literal["words", "sentences", "tokens"] = "words",
        batch_size: int = 16,
        prefix_ids: Sequence[int] | None = None,
        suffix_ids: Sequence[int] = (),
    ) -> None:
        if mode not in ("remove", "pad"):
            raise ValueError(f"mode={mode!r}: valid are 'remove', 'pad'")
        encoded = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)
        self.context_ids = torch.tensor(encoded["input_ids"], dtype=torch.long)
        self.target_ids = torch.tensor(tokenizer(target, add_special_tokens=False)["input_ids"], dtype=torch.long)
        if self.target_ids.numel() == 0:
            raise ValueError(f"target={target!r} has no tokens: TokenValue needs a non-empty target")
        if players == "tokens":
            self.owner = torch.arange(self.context_ids.numel())
            self.player_texts = [context[a:b] for a, b in encoded["offset_mapping"]]
        else:
            spans = player_spans(context, players)
            self.owner = torch.tensor(
                [
                    next((j for j, (a, b) in enumerate(spans) if s < b and e > a), -1)
                    for s, e in encoded["offset_mapping"]
                ]
            )
            self.player_texts = [context[a:b] for a, b in spans]
        self.model, self.tokenizer, self.mode, self.batch_size = causal_lm, tokenizer, mode, batch_size
        self.n_players = len(self.player_texts)
        if self.n_players == 0:
            raise ValueError(f"context={context!r} has no {players}: TokenValue needs at least one player")
        if prefix_ids is None:
            prefix_ids = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.prefix = torch.tensor(list(prefix_ids), dtype=torch.long)
        self.suffix = torch.tensor(list(suffix_ids), dtype=torch.long)

    def sequence(self, mask: torch.Tensor) -> torch.Tensor:
        """The input ids for one coalition: the prefix, the masked context, the suffix, the target."""
        present = (self.owner < 0) | mask[self.owner.clamp(min=0)]
        if self.mode == "remove":
            context = self.context_ids[present]
        else:
            context = torch.where(
                present, self.context_ids, torch.full_like(self.context_ids, self.tokenizer.pad_token_id)
            )
        return torch.cat([self.prefix, context, self.suffix, self.target_ids])

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        masks = check_masks(torch.as_tensor(masks), self.n_players).cpu()
        out = []
        device = model_device(self.model)
        with evaluating(self.model):
            for start in range(0, masks.size(0), self.batch_size):
                seqs = [self.sequence(m) for m in masks[start : start + self.batch_size]]
                length = max(s.numel() for s in seqs)
                ids = torch.full((len(seqs), length), self.tokenizer.pad_token_id, dtype=torch.long)
                attention = torch.zeros_like(ids)
                labels = torch.full_like(ids, IGNORE_INDEX)
                n_target = self.target_ids.numel()
                for row, seq in enumerate(seqs):  # right padding: positions stay 0..len-1
                    ids[row, : seq.numel()] = seq
                    attention[row, : seq.numel()] = 1
                    labels[row, seq.numel() - n_target : seq.numel()] = self.target_ids
                logits = self.model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
                out.append(sequence_logprobs_from_logits(logits, labels.to(device))[0].double().cpu())
        return torch.cat(out)
