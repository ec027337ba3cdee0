"""Black boxes for irregular time series in the shared batch format (:mod:`trustlit.data.timeseries`).

Every model maps ``forward(times, channels, values, observed) -> logits [B, C]`` and reads only the observed
entries: padding and deleted observations (``observed == False``) never change a prediction, which is what a
deletion perturbation relies on. Trained with cross-entropy; logs ``{stage}/loss``, ``{stage}/acc`` and, for two
classes, ``{stage}/auroc`` (torchmetrics).

- :class:`MTANClassifier`: mTAND-Enc (Shukla & Marlin, ICLR 2021, reml-lab/mTAN ``enc_mtan_classif``).
- :class:`ObservationTransformer`: a transformer encoder over (time, channel, value) tokens, as in STraTS
  (Tipirneni & Reddy, TKDD 2022).
- :class:`RareFeatureOracle`: the fixed white boxes Contimask explains on its rare-feature task.
"""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import BinaryAUROC

from trustlit.data.timeseries import WINDOW, check_channel_count
from trustlit.hparams import ClosedUnitInterval, PositiveFloat, PositiveInt, check_arguments, plain_numbers


class LearnedTimeEmbedding(nn.Module):
    """mTAN's learned time embedding phi(t) = [w_0 t + b_0, sin(W t + b)] of width ``dim`` (1 linear, dim - 1
    periodic components)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear, self.periodic = nn.Linear(1, 1), nn.Linear(1, dim - 1)

    def forward(self, times: torch.Tensor) -> torch.Tensor:
        t = times.unsqueeze(-1)
        return torch.cat([self.linear(t), torch.sin(self.periodic(t))], dim=-1)


class IrregularClassifier(L.LightningModule):
    """Cross-entropy training, evaluation logging and Adam for the black boxes; subclasses define ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.auroc = nn.ModuleDict({stage: BinaryAUROC() for stage in ("val", "test")})

    def setup(self, stage: str) -> None:
        check_channel_count(self.hparams.num_channels, self.trainer.datamodule)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self(batch["times"], batch["channels"], batch["values"], batch["observed"])

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits, label = self.logits(batch), batch["label"]
        loss = F.cross_entropy(logits, label)
        size = len(label)
        self.log(f"{stage}/loss", loss, prog_bar=stage != "train", batch_size=size)
        self.log(f"{stage}/acc", (logits.argmax(-1) == label).float().mean(), prog_bar=True, batch_size=size)
        if self.hparams.num_classes == 2 and stage in self.auroc:  # a per-step train AUROC would be noise
            self.auroc[stage].update(logits.softmax(-1)[:, 1], label)
            self.log(f"{stage}/auroc", self.auroc[stage], batch_size=size)
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def check_widths(model: nn.Module, name: str, width: int, num_heads: int, num_classes: int) -> None:
    """Refuse an attention width that ``num_heads`` does not divide (or below 2) and fewer than two classes."""
    owner = type(model).__name__
    if width % num_heads or width < 2:
        raise ValueError(f"{owner}: {name}={width} is invalid, expected a multiple of num_heads={num_heads}, >= 2")
    if num_classes < 2:
        raise ValueError(f"{owner}: num_classes={num_classes} is invalid, expected an integer >= 2")


def channel_attention(
    scores: torch.Tensor, channels: torch.Tensor, values: torch.Tensor, observed: torch.Tensor, num_channels: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel masked attention: for scores s [B, H, R, L] over the observations l, channel c's output at
    query r is sum_{l: c_l = c} softmax_l(s)[r, l] x_l, the softmax taken over channel c's observed entries only.
    Returns (values [B, H, R, F], has_observation [B, H, R, F]); a channel without observations gives 0 (mTAN's
    softmax over a fully masked channel averages its zeros)."""
    index = channels.clamp(0, num_channels - 1)[:, None, None, :].expand_as(scores)
    masked = scores.masked_fill(~observed[:, None, None, :], -torch.inf)
    peak = torch.full((*scores.shape[:-1], num_channels), -torch.inf, dtype=scores.dtype, device=scores.device)
    peak = peak.scatter_reduce(-1, index, masked, reduce="amax")
    weights = torch.exp(masked - peak.gather(-1, index).detach().clamp_min(-1e30))  # 0 where not observed
    total = torch.zeros_like(peak).scatter_add(-1, index, weights)  # >= 1 where the channel has an observation
    weighted = torch.zeros_like(peak).scatter_add(-1, index, weights * values[:, None, None, :])
    return weighted / total.clamp_min(1.0), (total > 0).to(scores.dtype)


class MTANClassifier(IrregularClassifier):
    """mTAND-Enc: multi-time attention from reference points to the observations, a GRU, an MLP head.

    Shukla & Marlin, "Multi-Time Attention Networks for Irregularly Sampled Time Series", ICLR 2021; released
    ``enc_mtan_classif`` (reml-lab/mTAN ``src/models.py``). With phi the learned time embedding
    (:class:`LearnedTimeEmbedding`, width ``embed_time``), R reference points r_j = linspace(0, 1, R), head h of
    width d_k = embed_time / H: q_jh = (W_q phi(r_j))_h, k_lh = (W_k phi(t_l))_h, s_jlh = q_jh . k_lh / sqrt(d_k);
    for every channel c, z_jhc = sum_{l: c_l = c} softmax(s_jh)_l x_l over channel c's observations
    (:func:`channel_attention`), next to the observation-mask channel m_jhc (1 if c was observed), so a query
    sees [x, m] (2F values per head, as the released model attends over [values, mask]). A linear map of the
    H * 2F values to ``hidden``, a GRU over the R reference points, its last state into
    Linear(hidden, 300) - ReLU - Linear(300, 300) - ReLU - Linear(300, C).

    Defaults are the released PhysioNet mTAND-Enc command (``--rec-hidden 128 --embed-time 128 --num-heads 1
    --learn-emb --lr 0.0001``, 128 reference points); recipes use smaller widths. Only the learned embedding is
    implemented (the released fixed one is off under ``--learn-emb``).
    """

    def __init__(
        self,
        num_channels: PositiveInt = 50,
        num_classes: PositiveInt = 2,
        num_reference_points: PositiveInt = 128,
        embed_time: PositiveInt = 128,
        num_heads: PositiveInt = 1,
        hidden: PositiveInt = 128,
        classifier_hidden: PositiveInt = 300,
        lr: PositiveFloat = 1e-4,
    ) -> None:
        super().__init__()
        check_arguments(MTANClassifier.__init__, locals())
        check_widths(self, "embed_time", embed_time, num_heads, num_classes)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.register_buffer("reference_points", torch.linspace(0, 1, num_reference_points), persistent=False)
        self.time_embedding = LearnedTimeEmbedding(embed_time)
        self.query, self.key = nn.Linear(embed_time, embed_time), nn.Linear(embed_time, embed_time)
        self.attention_output = nn.Linear(num_heads * 2 * num_channels, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.classifier = nn.Sequential(
            nn.Linear(hidden, classifier_hidden),
            nn.ReLU(),
            nn.Linear(classifier_hidden, classifier_hidden),
            nn.ReLU(),
            nn.Linear(classifier_hidden, num_classes),
        )

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[..., N, embed_time] -> [..., H, N, d_k]."""
        h = self.hparams.num_heads
        return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(-3, -2)

    def forward(
        self, times: torch.Tensor, channels: torch.Tensor, values: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        h, observed = self.hparams, observed.bool()
        times, values = times.masked_fill(~observed, 0.0), values.masked_fill(~observed, 0.0)  # padding may be NaN
        query = self.heads(self.query(self.time_embedding(self.reference_points)))  # [H, R, d_k]
        key = self.heads(self.key(self.time_embedding(times)))  # [B, H, L, d_k]
        scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])  # [B, H, R, L]
        interpolated, seen = channel_attention(scores, channels, values, observed, h.num_channels)
        features = torch.cat([interpolated, seen], dim=-1).transpose(1, 2).flatten(2)  # [B, R, H * 2F]
        _, last = self.gru(self.attention_output(features))
        return self.classifier(last[-1])


class ObservationTransformer(IrregularClassifier):
    """A transformer encoder over observation tokens, mean-pooled over the observed ones.

    Each observation (t_l, c_l, x_l) is one token e_l = phi(t_l) + E[c_l] + w x_l + b (learned time embedding
    :class:`LearnedTimeEmbedding`, channel embedding E, value projection), the triplet embedding of STraTS
    (Tipirneni & Reddy, "Self-Supervised Transformer for Sparse and Irregularly Sampled Multivariate Clinical
    Time-Series", TKDD 2022). ``num_layers`` post-norm encoder layers attend with the padding mask ~observed;
    the head reads mean_{l observed} h_l (a sample with no observation pools to 0).
    """

    def __init__(
        self,
        num_channels: PositiveInt = 50,
        num_classes: PositiveInt = 2,
        d_model: PositiveInt = 64,
        num_heads: PositiveInt = 4,
        num_layers: PositiveInt = 2,
        dim_feedforward: PositiveInt = 128,
        dropout: ClosedUnitInterval = 0.1,
        lr: PositiveFloat = 1e-3,
    ) -> None:
        super().__init__()
        check_arguments(ObservationTransformer.__init__, locals())
        check_widths(self, "d_model", d_model, num_heads, num_classes)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.time_embedding = LearnedTimeEmbedding(d_model)
        self.channel_embedding = nn.Embedding(num_channels, d_model)
        self.value_projection = nn.Linear(1, d_model)
        layer = nn.TransformerEncoderLayer(d_model, num_heads, dim_feedforward, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(
        self, times: torch.Tensor, channels: torch.Tensor, values: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        observed = observed.bool()
        channels = channels.clamp(0, self.hparams.num_channels - 1)  # padding may hold any channel
        times, values = times.masked_fill(~observed, 0.0), values.masked_fill(~observed, 0.0).unsqueeze(-1)  # NaN
        tokens = self.time_embedding(times) + self.channel_embedding(channels) + self.value_projection(values)
        padding = ~observed
        padding[:, 0] &= observed.any(dim=1)  # a sample with no observation attends to one unread token, not NaN
        hidden = self.encoder(tokens, src_key_padding_mask=padding)
        pooled = torch.where(observed.unsqueeze(-1), hidden, 0.0).sum(1) / observed.sum(1, keepdim=True).clamp_min(1)
        return self.head(pooled)


class RareFeatureOracle(L.LightningModule):
    """The fixed white boxes Contimask explains on its rare-feature task (eth-siplab/contimask
    ``rare_feature_value.py`` and ``rare_feature_temp.py``): with S the salient channels and W = (0.25, 0.75)
    open, a_l = 1[c_l in S and t_l in W] for observed l,

        mode="value": f(x) = sum_l a_l x_l^2        (released: ((X * mask)**2).sum())
        mode="count": f(x) = sum_l a_l              (released: mask.sum(), the observed salient cells)

    returned as a score [B, 1] (the released functions are regressions explained by MSE, not classifiers).
    "count" depends only on which observations exist: only a deletion perturbation changes it. The ground truth
    is :meth:`saliency` (a_l). Released S: channels s..s+4 with s = torch.randint(0, F - 5) per explained sample.
    """

    def __init__(
        self,
        salient_channels: list[int],
        window: tuple[float, float] = WINDOW,
        mode: Literal["value", "count"] = "value",
    ) -> None:
        super().__init__()
        if mode not in ("value", "count"):
            raise ValueError(f"RareFeatureOracle: mode={mode!r} is invalid, expected 'value' or 'count'")
        if not salient_channels or min(salient_channels) < 0:
            raise ValueError(
                f"RareFeatureOracle: salient_channels={salient_channels!r} is invalid, expected channel indices >= 0"
            )
        if not window[0] < window[1]:
            raise ValueError(f"RareFeatureOracle: window={window!r} is invalid, expected (start, end) with start < end")
        self.save_hyperparameters()
        self.register_buffer("salient", torch.tensor(sorted(set(salient_channels))), persistent=False)

    def saliency(self, times: torch.Tensor, channels: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """a_l: True for observed entries of a salient channel inside the open window."""
        start, end = self.hparams.window
        return observed.bool() & torch.isin(channels, self.salient) & (times > start) & (times < end)

    def forward(
        self, times: torch.Tensor, channels: torch.Tensor, values: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        active = self.saliency(times, channels, observed)
        terms = torch.where(active, values.square(), 0.0) if self.hparams.mode == "value" else active.to(values.dtype)
        return terms.sum(-1, keepdim=True)
