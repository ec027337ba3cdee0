"""Samples of a known discrete distribution over d symbols: the data of private distribution estimation.

The distribution p is a power law p_i ∝ i^-beta (``source: power_law``), uniform (``uniform``), or the token
distribution of a QA corpus under the SmolLM2 tokenizer (``source``: ``fictitious``, a directory holding TOFU's
``full.json``, or the hub id ``locuslab/TOFU``): question and answer of every record are tokenized, the counts cached
under ``$TRUSTLIT_CACHE/token_counts/``, and the top-d tokens kept and renormalised
(:func:`~trustlit.privacy.distribution.token_distribution`). The samples are drawn from p as in Ye, Feldman, Talwar
(NeurIPS 2025): Poisson (x_i ~ Poi(n p_i), so about n samples) or multinomial (exactly n). The test loader serves
them as batches of symbol indices (LongTensor [batch]) in random order; ``probabilities`` is the truth an estimate
is scored against. Notes: docs/methods/private_good_turing.md
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from trustlit.hparams import NonNegativeFloat, NonNegativeInt, PositiveInt, check_arguments
from trustlit.privacy.distribution import (
    corpus_texts,
    multinomial_counts,
    poisson_counts,
    power_law,
    token_counts,
    token_distribution,
    uniform,
)

SYNTHETIC = ("power_law", "uniform")


class DistributionSamples(L.LightningDataModule):
    """n samples of a distribution over d symbols (module docstring).

    Args:
        source: ``power_law``, ``uniform``, or a QA corpus whose token distribution is sampled (``fictitious``, a
            TOFU directory, ``locuslab/TOFU``).
        d: the number of symbols (a token distribution keeps its d most frequent tokens).
        n: the sample size (the Poisson mean under ``poisson``).
        beta: the power law's exponent.
        sampling: ``poisson`` (the paper's model) or ``multinomial``.
        max_samples: use the first QA records of the corpus only (None: all).
        fictitious_authors: authors of the generated corpus when ``source: fictitious``.
        batch_size: symbols per batch.
        seed: seeds the draw of the samples and their order.
    """

    def __init__(
        self,
        source: str = "power_law",
        d: PositiveInt = 1000,
        n: PositiveInt = 10_000,
        beta: NonNegativeFloat = 1.0,
        sampling: Literal["poisson", "multinomial"] = "poisson",
        max_samples: PositiveInt | None = None,
        fictitious_authors: PositiveInt = 128,
        batch_size: PositiveInt = 4096,
        seed: NonNegativeInt = 0,
    ) -> None:
        super().__init__()
        check_arguments(DistributionSamples.__init__, locals())
        if sampling not in ("poisson", "multinomial"):
            raise ValueError(
                f"DistributionSamples: sampling={sampling!r} is invalid, expected 'poisson' or 'multinomial'"
            )
        self.source, self.d, self.n, self.beta, self.sampling = source, int(d), int(n), float(beta), sampling
        self.max_samples, self.fictitious_authors = max_samples, int(fictitious_authors)
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.probabilities: np.ndarray | None = None
        self.samples: torch.Tensor | None = None

    def distribution(self) -> np.ndarray:
        """The true p [d] of ``source``."""
        if self.source == "power_law":
            return power_law(self.d, self.beta)
        if self.source == "uniform":
            return uniform(self.d)
        from trustlit.data.qa import FictitiousConfig, load_qa_split
        from trustlit.llm.loading import cache_dir

        records = load_qa_split(self.source, "full", FictitiousConfig(num_authors=self.fictitious_authors))
        records = list(records)[: self.max_samples]
        name = "".join(ch if ch.isalnum() else "_" for ch in self.source.strip("/").split("/")[-1])
        counts = token_counts(corpus_texts(records), cache=cache_dir() / "token_counts" / f"{name}.npy")
        return token_distribution(counts, self.d)

    def setup(self, stage: str) -> None:
        if self.samples is not None:
            return
        self.probabilities = self.distribution()
        draw = poisson_counts if self.sampling == "poisson" else multinomial_counts
        rng = np.random.default_rng(self.seed)
        counts = draw(self.probabilities, self.n, seed=rng)[0]
        symbols = rng.permutation(np.repeat(np.arange(self.d), counts))
        self.samples = torch.from_numpy(symbols)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.samples, batch_size=self.batch_size, shuffle=False)
