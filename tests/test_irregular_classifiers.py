"""Black boxes for irregular time series: padding and deletion invariance, mTAN's per-channel attention against
the released dense formulation, Contimask's white box, and tiny training runs that beat chance."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import quiet_trainer

from trustlit.data.timeseries import IrregularTimeSeriesDataModule, collate_observations, rare_feature_observations
from trustlit.irregular_classifiers import (
    MTANClassifier,
    ObservationTransformer,
    RareFeatureOracle,
    channel_attention,
)

pytestmark = pytest.mark.usefixtures("one_thread")


TINY_MTAN = {"num_reference_points": 16, "embed_time": 16, "num_heads": 2, "hidden": 16, "classifier_hidden": 32}
TINY_TRANSFORMER = {"d_model": 16, "num_heads": 2, "num_layers": 2, "dim_feedforward": 32}


def tiny_models(num_channels: int) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    models = [
        MTANClassifier(num_channels=num_channels, **TINY_MTAN),
        ObservationTransformer(num_channels=num_channels, **TINY_TRANSFORMER),
    ]
    return [model.eval() for model in models]


def padded(batch: dict[str, torch.Tensor], extra: int) -> dict[str, torch.Tensor]:
    """``batch`` with ``extra`` padding entries of garbage (NaN times and values, any channel) appended."""
    rows = batch["times"].shape[0]
    garbage = {
        "times": torch.full((rows, extra), float("nan")),
        "channels": torch.randint(-3, 99, (rows, extra)),
        "values": torch.full((rows, extra), float("nan")),
        "observed": torch.zeros(rows, extra, dtype=torch.bool),
    }
    return {key: torch.cat([batch[key], garbage[key]], dim=1) for key in garbage}


def call(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(batch["times"], batch["channels"], batch["values"], batch["observed"])


@pytest.mark.parametrize("index", [0, 1], ids=["mtan", "transformer"])
def test_padding_and_deleted_observations_never_change_the_logits(index):
    samples = rare_feature_observations(6, num_times=12, num_channels=5, num_salient=2, seed=4)
    model = tiny_models(5)[index]
    batch = collate_observations(samples)
    alone = torch.cat([call(model, collate_observations([s])) for s in samples])
    assert torch.allclose(call(model, batch), alone, atol=1e-5)
    assert torch.allclose(call(model, padded(batch, 9)), alone, atol=1e-5)
    # deleting observations (observed = False in place) equals building the sample without them
    keep = [torch.rand(len(s.times), generator=torch.Generator().manual_seed(i)) < 0.6 for i, s in enumerate(samples)]
    deleted = dict(batch)
    deleted["observed"] = batch["observed"].clone()
    for row, mask in enumerate(keep):
        deleted["observed"][row, : len(mask)] &= mask
    rebuilt = [
        type(s)(s.times[mask], s.channels[mask], s.values[mask], s.label, s.saliency[mask])
        for s, mask in zip(samples, keep, strict=True)
    ]
    assert torch.allclose(call(model, deleted), call(model, collate_observations(rebuilt)), atol=1e-5)
    assert not torch.allclose(call(model, deleted), alone, atol=1e-3), "deletion must be able to change a prediction"
    empty = {key: value[:, :0] for key, value in batch.items() if key in ("times", "channels", "values", "observed")}
    assert torch.allclose(call(model, padded(empty, 4)), call(model, padded(empty, 1)))
    assert torch.isfinite(call(model, padded(empty, 4))).all()


def released_dense_attention(scores, channels, values, observed, num_channels):
    """mTAN's ``multiTimeAttention.attention`` on the dense input [x, m] ([B, L, 2F], one row per observation):
    scores repeated per dimension, masked_fill(m == 0, -1e9), softmax over time, sum of p * [x, m]."""
    dense = torch.zeros(*values.shape, num_channels)
    dense.scatter_(-1, channels.unsqueeze(-1), (values * observed).unsqueeze(-1))
    mask = torch.zeros_like(dense).scatter_(-1, channels.unsqueeze(-1), observed.float().unsqueeze(-1))
    inputs, mask = torch.cat([dense, mask], -1), torch.cat([mask, mask], -1)  # [B, L, 2F]
    repeated = scores.unsqueeze(-1).repeat_interleave(2 * num_channels, dim=-1)  # [B, H, R, L, 2F]
    repeated = repeated.masked_fill(mask[:, None, None] == 0, -1e9)
    weights = torch.softmax(repeated, dim=-2)
    return (weights * inputs[:, None, None]).sum(-2)  # [B, H, R, 2F]


def test_channel_attention_equals_the_released_dense_formulation():
    generator = torch.Generator().manual_seed(0)
    batch, heads, queries, length, num_channels = 3, 2, 5, 11, 4
    scores = 3 * torch.randn(batch, heads, queries, length, generator=generator)
    channels = torch.randint(0, num_channels - 1, (batch, length), generator=generator)  # channel 3 never observed
    values = torch.randn(batch, length, generator=generator)
    observed = torch.rand(batch, length, generator=generator) < 0.7
    interpolated, seen = channel_attention(scores, channels, values * observed, observed, num_channels)
    expected = released_dense_attention(scores, channels, values, observed, num_channels)
    assert torch.allclose(torch.cat([interpolated, seen], -1), expected, atol=1e-6)
    assert not seen[..., 3].any() and not interpolated[..., 3].any()


def test_mtan_scores_are_scaled_dot_products_of_the_learned_time_embedding():
    model = MTANClassifier(num_channels=3, **TINY_MTAN)
    t = torch.tensor([0.0, 0.5, 1.0])
    embedding = model.time_embedding(t)
    linear, periodic = model.time_embedding.linear, model.time_embedding.periodic
    assert torch.allclose(embedding[:, 0], linear.weight[0, 0] * t + linear.bias[0])
    assert torch.allclose(embedding[:, 1:], torch.sin(t[:, None] * periodic.weight[:, 0] + periodic.bias))
    assert embedding.shape == (3, 16) and model.heads(embedding).shape == (2, 3, 8)
    assert math.isclose(model.hparams.lr, 1e-4) and MTANClassifier().hparams.embed_time == 128


def test_rare_feature_oracle_is_the_released_white_box_and_its_truth_is_the_generators():
    samples = rare_feature_observations(5, num_times=20, num_channels=8, num_salient=3, seed=7)
    for sample in samples:
        block = sample.channels[sample.saliency].unique().tolist()
        batch = collate_observations([sample])
        args = (batch["times"], batch["channels"], batch["values"], batch["observed"])
        value, count = RareFeatureOracle(block), RareFeatureOracle(block, mode="count")
        assert torch.equal(value.saliency(batch["times"], batch["channels"], batch["observed"]), batch["saliency"])
        assert torch.allclose(value(*args), sample.values[sample.saliency].square().sum().view(1, 1))
        assert count(*args).item() == sample.saliency.sum().item()
        # a value perturbation leaves the count white box unchanged; deleting a salient observation lowers it
        blurred = (args[0], args[1], torch.zeros_like(args[2]), args[3])
        assert torch.equal(count(*blurred), count(*args)) and value(*blurred).item() == 0
        observed = batch["observed"].clone()
        observed[0, batch["saliency"][0].nonzero()[0]] = False
        assert count(args[0], args[1], args[2], observed).item() == count(*args).item() - 1
    with pytest.raises(ValueError, match="mode='sum' is invalid"):
        RareFeatureOracle([0], mode="sum")


def test_bad_hyperparameters_are_refused_in_one_line():
    with pytest.raises(ValueError, match="embed_time=10 is invalid, expected a multiple of num_heads=4"):
        MTANClassifier(embed_time=10, num_heads=4)
    with pytest.raises(ValueError, match="d_model=10 is invalid"):
        ObservationTransformer(d_model=10, num_heads=4)
    with pytest.raises(ValueError, match="num_classes=1 is invalid"):
        ObservationTransformer(num_classes=1)
    with pytest.raises(ValueError, match="lr=0 is invalid"):
        MTANClassifier(lr=0)


def test_a_model_for_the_wrong_channel_count_is_refused_at_setup():
    data = IrregularTimeSeriesDataModule(num_samples=20, num_times=6, num_channels=4, num_salient=2)
    with pytest.raises(ValueError, match="num_channels=5 but the data \\(rare_feature\\) has 4 channels"):
        quiet_trainer(max_steps=1).fit(ObservationTransformer(num_channels=5, **TINY_TRANSFORMER), datamodule=data)


@pytest.mark.parametrize(
    ("model_class", "options", "lr"),
    [(MTANClassifier, TINY_MTAN, 1e-2), (ObservationTransformer, TINY_TRANSFORMER, 3e-3)],
    ids=["mtan", "transformer"],
)
def test_a_tiny_training_run_beats_chance_on_the_rare_feature_task(model_class, options, lr):
    torch.manual_seed(0)
    sizes = {"num_samples": 240, "num_times": 16, "num_channels": 5, "num_salient": 2, "shift": 2.0}
    data = IrregularTimeSeriesDataModule(**sizes, batch_size=32, val_fraction=0.0, test_fraction=0.25)
    model = model_class(num_channels=5, lr=lr, **options)
    trainer = quiet_trainer(max_epochs=12)
    before = trainer.test(model, datamodule=data, verbose=False)[0]
    trainer.fit(model, datamodule=data)
    after = trainer.test(model, datamodule=data, verbose=False)[0]
    assert after["test/loss"] < before["test/loss"] - 0.1
    assert after["test/acc"] > 0.75 and after["test/auroc"] > 0.8, after
