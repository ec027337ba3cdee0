"""Secret messages for StegoZip, and the (pruned, original) pairs its restorer is fine-tuned on.

Messages are TOFU answers (a directory in TOFU's layout with ``full.json``, or the hub id ``locuslab/TOFU``; 20
answers per fictitious author) and the fictitious-facts sentences of :mod:`trustlit.fictitious` (source
``fictitious``). Whole authors are held out (:func:`trustlit.data.concepts.held_out_groups`): split ``train`` holds
the restorer's public data D, split ``test`` the secret messages, from authors the restorer never saw.

A pair is the restorer's prompt (StegoZip's instruction and the message pruned at quantile alpha, no adaptation,
as the released code builds its training set) and its target (the message with each pruned word bracketed); a
``stable_ratio`` of the training pairs gets the target itself as input, so the restorer learns to leave given words
alone (the released code's ``--stable_ratio``). Pruning needs the LM's self-information: the module's model under a
Trainer (before training: LoRA starts as the base model), or ``datamodule.pruner`` when used on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from trustlit.data.concepts import held_out_groups
from trustlit.data.qa import FICTITIOUS, QADataModule, QARecords, load_qa_split
from trustlit.fictitious import fictitious_qa
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments
from trustlit.llm.prompts import PromptFormat
from trustlit.paths import is_hub_id

SPLITS = ("train", "test")
TOFU_ANSWERS_PER_AUTHOR = 20


def source_messages(source: str, num_authors: int = 20, seed: int = 0) -> list[tuple[str, str]]:
    """(message, author) pairs of one source: ``fictitious`` (``num_authors`` generated authors) or a TOFU dir."""
    if source == FICTITIOUS:
        return [(r["answer"], f"fictitious-{r['author_id']}") for r in fictitious_qa(num_authors, seed)]
    records = load_qa_split(source, "full")  # a TOFU directory or the hub id locuslab/TOFU
    return [(r["answer"], f"tofu-{i // TOFU_ANSWERS_PER_AUTHOR}") for i, r in enumerate(records)]


def split_messages(
    sources: list[str], split: str, held_out: float, seed: int, max_per_source: int | None = None
) -> list[str]:
    """The messages of ``split`` (``train`` or ``test``, whole authors held out), up to ``max_per_source`` each."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid, expected one of {SPLITS}")
    messages = []
    for source in sources:
        pairs = source_messages(source, seed=seed)
        test = held_out_groups(np.array([a for _, a in pairs]), held_out, seed)
        chosen = [m for (m, _), t in zip(pairs, test, strict=True) if t == (split == "test") and "[" not in m]
        order = np.random.default_rng(seed).permutation(len(chosen))
        messages += [chosen[i] for i in order[:max_per_source]]
    return messages


class StegoMessageDataModule(QADataModule):
    """Restoration pairs (module docstring) of held-out-author splits ``train`` and ``test``.

    Args:
        sources: ``fictitious`` and/or TOFU directories.
        held_out: fraction of each source's authors in ``test``.
        alpha: the pruning quantile of the pairs (StegoZip: 0.4).
        stable_ratio: fraction of training pairs whose input is their target (StegoZip: 0.1).
        max_messages: messages per source and split (quick runs; None: all).
    """

    def __init__(
        self,
        sources: list[str] | None = None,
        train_split: str | None = "train",
        eval_splits: list[str] | None = None,
        held_out: float = 0.2,
        alpha: float = 0.4,
        stable_ratio: float = 0.1,
        max_messages: PositiveInt | None = None,
        batch_size: PositiveInt = 8,
        eval_batch_size: PositiveInt | None = None,
        max_length: PositiveInt = 256,
        prompt_format: PromptFormat = "auto",
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        check_arguments(StegoMessageDataModule.__init__, locals())
        for name, value in (("held_out", held_out), ("alpha", alpha), ("stable_ratio", stable_ratio)):
            if not 0 <= value <= 1:
                raise ValueError(f"{name}={value!r} is invalid, expected a fraction in [0, 1]")
        self.sources = list(sources) if sources is not None else [FICTITIOUS]
        super().__init__(
            source=FICTITIOUS,
            train_split=train_split,
            eval_splits=eval_splits if eval_splits is not None else ["test"],
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            max_length=max_length,
            prompt_format=prompt_format,
            num_workers=num_workers,
            seed=seed,
        )
        self.held_out, self.alpha, self.stable_ratio, self.max_messages = held_out, alpha, stable_ratio, max_messages
        self.pruner: nn.Module | None = None
        self.reference_info: float | None = None  # Ī(D), the mean self-information of the training messages

    def validate_source(self, source: str) -> None:
        for name in getattr(self, "sources", [source]):
            directory = Path(name).expanduser()
            hub = not directory.exists() and is_hub_id(name)
            if name == FICTITIOUS or (directory / "full.json").is_file() or hub:
                continue
            raise FileNotFoundError(
                f"sources: {name!r} is neither 'fictitious', a TOFU directory with full.json, nor a hub id"
            )

    def resolve_pruner(self) -> nn.Module:
        if self.pruner is None:
            module = self.trainer.lightning_module if self.trainer is not None else None
            self.pruner = getattr(module, "model", None)
        if self.pruner is None:
            raise RuntimeError(
                f"{type(self).__name__} needs an LM to prune with: attach it to a Trainer or set .pruner"
            )
        return self.pruner

    def load_records(self, split: str) -> QARecords:
        import datasets

        from trustlit.stego.stegozip import INSTRUCTION, prune

        messages = split_messages(self.sources, split, self.held_out, self.seed, self.max_messages)
        model, tokenizer = self.resolve_pruner(), self.resolve_tokenizer()
        pruned = [prune(model, tokenizer, m, alpha=self.alpha, eta=0.0) for m in messages]
        if split == "train":
            self.reference_info = float(np.mean([p.mean_info for p in pruned]))
        stable = np.random.default_rng(self.seed).random(len(pruned)) < self.stable_ratio * (split == "train")
        records: list[dict[str, Any]] = [
            {"question": f"{INSTRUCTION}\n\n{p.target if s else p.text}", "answer": p.target, "message": m}
            for p, s, m in zip(pruned, stable, messages, strict=True)
        ]
        return datasets.Dataset.from_list(records)
