"""Contimask: the perturbations (closed forms, invariants), the mask network, the loss, and the fitted masks on
a black box that reads one channel in one time window (the mask must concentrate there)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import quiet_trainer
from torch import nn
from torch.utils.data import DataLoader

from trustlit.attribution.contimask import Contimask, FourierMaskNetwork, area_and_variation, fourier_features
from trustlit.attribution.perturbations import (
    channel_average,
    delete,
    fade,
    gaussian_blur,
    hard_concrete_keep,
    keep_probability,
)

pytestmark = pytest.mark.usefixtures("one_thread")
CHANNEL, WINDOW = 2, (0.3, 0.5)


class Window(nn.Module):
    """logits [0, w * sum of the values of channel 2 observed at t in (0.3, 0.5)]; counts what it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.seen: list[torch.Tensor] = []

    def forward(self, times, channels, values, observed):
        self.seen.append(observed.sum(-1))
        inside = observed & (channels == CHANNEL) & (times > WINDOW[0]) & (times < WINDOW[1])
        score = self.weight * (values * inside).sum(-1)
        return torch.stack([torch.zeros_like(score), score], -1)


def make_batch(rows: int = 2, length: int = 40, channels: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    times = torch.rand(rows, length, generator=generator).sort(-1).values
    channel = torch.randint(0, channels, (rows, length), generator=generator)
    channel[:, length // 2] = CHANNEL  # at least one observation in the window per row
    times[:, length // 2] = 0.4
    times = times.sort(-1).values
    observed = torch.ones(rows, length, dtype=torch.bool)
    observed[-1, -5:] = False  # padding
    values = torch.where(observed, 2 * torch.randn(rows, length, generator=generator), 0.0)
    truth = observed & (channel == CHANNEL) & (times > WINDOW[0]) & (times < WINDOW[1])
    return {"times": times, "channels": channel, "values": values, "observed": observed, "saliency": truth,
            "index": torch.arange(rows), "label": torch.zeros(rows, dtype=torch.long)}  # fmt: skip


def explain(module: Contimask, batch: dict[str, torch.Tensor]) -> Contimask:
    """One training_step outside a Trainer (logging switched off)."""
    module.on_train_epoch_start()
    module.log = lambda *args, **kwargs: None
    module.training_step(batch, 0)
    return module


# --- perturbations ------------------------------------------------------------------------------------------------


def test_blur_with_mask_one_returns_the_input():
    batch = make_batch()
    mask = torch.ones_like(batch["values"])
    blurred = gaussian_blur(batch["times"], batch["channels"], batch["values"], batch["observed"], mask)
    assert torch.allclose(blurred, batch["values"], atol=1e-6)


def test_blur_closed_form_and_channels_do_not_mix():
    times = torch.tensor([[0.0, 0.5, 0.6, 1.0]])
    channels = torch.tensor([[0, 1, 0, 0]])
    values = torch.tensor([[1.0, 100.0, 3.0, 0.0]])
    observed = torch.tensor([[True, True, True, False]])
    mask = torch.tensor([[0.5, 1.0, 1.0, 0.0]])
    blurred = gaussian_blur(times, channels, values, observed, mask, sigma_max=0.4)
    sigma = 0.4 * (1 + 1e-7 - 0.5)
    weight = math.exp(-(0.6**2) / (2 * sigma**2))
    assert blurred[0, 0].item() == pytest.approx((1.0 + 3.0 * weight) / (1 + weight), rel=1e-5)
    assert blurred[0, 1:].tolist() == pytest.approx([100.0, 3.0, 0.0])  # kept, kept (other channel), padding


def test_blur_and_average_match_the_definition_observation_by_observation():
    batch = make_batch(rows=3, length=30, channels=5, seed=3)
    times, channels, values, observed = (batch[k] for k in ("times", "channels", "values", "observed"))
    mask = torch.rand(times.shape, generator=torch.Generator().manual_seed(0))
    blurred = gaussian_blur(times, channels, values, observed, mask, sigma_max=0.3)
    average = channel_average(times, channels, values, observed, window=0.4)
    for n, i in observed.nonzero().tolist():
        same = [j for j in range(times.shape[1]) if observed[n, j] and channels[n, j] == channels[n, i]]
        sigma = 0.3 * (1 + 1e-7 - float(mask[n, i]))
        weights = [math.exp(-((float(times[n, j] - times[n, i])) ** 2) / (2 * sigma**2)) for j in same]
        expected = sum(w * float(values[n, j]) for w, j in zip(weights, same, strict=True)) / sum(weights)
        assert float(blurred[n, i]) == pytest.approx(expected, rel=1e-4, abs=1e-5)
        near = [float(values[n, j]) for j in same if abs(float(times[n, j] - times[n, i])) <= 0.2]
        assert float(average[n, i]) == pytest.approx(sum(near) / len(near), rel=1e-5, abs=1e-6)
    assert torch.equal(blurred[~observed], values[~observed])


def test_blur_is_differentiable_in_the_mask():
    batch = make_batch()
    mask = torch.full_like(batch["values"], 0.5, requires_grad=True)
    gaussian_blur(batch["times"], batch["channels"], batch["values"], batch["observed"], mask).sum().backward()
    assert torch.isfinite(mask.grad).all() and mask.grad.abs().sum() > 0


def test_fade_closed_forms():
    times = torch.tensor([[0.0, 0.1, 0.5, 0.9, 0.0]])
    channels = torch.tensor([[0, 1, 0, 0, 0]])
    values = torch.tensor([[1.0, 5.0, 2.0, 6.0, 0.0]])
    observed = torch.tensor([[True, True, True, True, False]])
    whole = channel_average(times, channels, values, observed)
    assert whole[0].tolist() == pytest.approx([3.0, 5.0, 3.0, 3.0, 0.0])
    windowed = channel_average(times, channels, values, observed, window=1.0)  # |dt| <= 0.5
    assert windowed[0, :4].tolist() == pytest.approx([1.5, 5.0, 3.0, 4.0])
    assert torch.equal(fade(values, observed, torch.ones_like(values), whole), values)
    half = fade(values, observed, torch.full_like(values, 0.5), whole)
    assert half[0].tolist() == pytest.approx([2.0, 5.0, 2.5, 4.5, 0.0])


def test_deletion_marks_removed_observations_unobserved():
    values = torch.tensor([[1.0, 2.0, 3.0]])
    observed = torch.tensor([[True, True, False]])
    kept_values, kept = delete(values, observed, torch.tensor([[False, True, True]]))
    assert kept.tolist() == [[False, True, False]] and kept_values.tolist() == [[0.0, 2.0, 0.0]]


def test_hard_concrete_keep_frequency_matches_its_closed_form():
    logits = torch.tensor([-1.0, 0.0, 1.0]).expand(20000, 3)
    keep = hard_concrete_keep(logits, 0.8, torch.Generator().manual_seed(0)).float().mean(0)
    assert keep.tolist() == pytest.approx((1 - torch.exp(-torch.exp(logits[0]))).tolist(), abs=0.015)
    assert keep_probability(logits[0]).tolist() == pytest.approx((1 - torch.exp(-torch.exp(logits[0]))).tolist())


# --- mask network and loss --------------------------------------------------------------------------------------


def test_mask_network_instances_are_independent_and_flat_round_trips():
    network = FourierMaskNetwork(3, 5, hidden_dim=8, n_frequencies=4)
    times = torch.rand(3, 7)
    logits = network(times)
    assert logits.shape == (3, 7, 5)
    logits[1].sum().backward()
    assert network.weights[0].grad[0].abs().sum() == 0 and network.weights[0].grad[1].abs().sum() > 0
    layers = network.unflatten(network.flat())
    features = fourier_features(times, 4)
    from trustlit.attribution.contimask import mlp_logits

    assert torch.allclose(mlp_logits(layers, features), logits)


def test_area_and_variation_closed_form():
    mask = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])  # last row: padding
    times = torch.tensor([[0.1, 0.1, 0.5, 0.0]])
    observed = torch.tensor([[True, True, True, False]])
    area, variation = area_and_variation(mask, times, observed)
    assert area.item() == pytest.approx(2 / 6)
    # |diffs|: (1 + 0) at the repeated time, (0 + 1) next; one distinct consecutive time pair, 2 channels
    assert variation.item() == pytest.approx(2 / 2)


# --- fitted masks -------------------------------------------------------------------------------------------------


def concentration(module: Contimask) -> tuple[float, float]:
    inside = torch.cat([row["saliency"][row["truth"]] for row in module.explained])
    outside = torch.cat([row["saliency"][~row["truth"]] for row in module.explained])
    return float(inside.mean()), float(outside.mean())


@pytest.mark.parametrize(
    ("perturbation", "budget"),
    [("blur", {"steps": 150}), ("fade", {"steps": 150}),
     ("deletion", {"generations": 30, "popsize": 20, "samples": 4}),
     ("fade", {"optimizer": "pgpe", "generations": 100, "popsize": 20})],
)  # fmt: skip
def test_mask_concentrates_on_the_window(perturbation, budget):
    module = explain(Contimask(Window(), perturbation=perturbation, n_channels=4, **budget), make_batch())
    inside, outside = concentration(module)
    assert inside > 0.3 and outside < 0.05, (inside, outside)
    assert module.hparams.optimizer == budget.get("optimizer", "pgpe" if perturbation == "deletion" else "adam")


def test_deletion_perturbation_removes_observations_the_black_box_sees():
    black_box = Window()
    module = Contimask(black_box, perturbation="deletion", n_channels=4, samples=3)
    module.generator = torch.Generator().manual_seed(0)
    batch = make_batch()
    logits = torch.full((*batch["times"].shape, 4), 5.0)  # P(keep) = 1 - exp(-e^5) = 1 - 1e-64
    logits[..., CHANNEL] = -20.0  # P(keep) = 2e-9: channel 2 is deleted
    black_box.seen.clear()
    module.losses(logits, batch, torch.zeros(2, 2), area=1.0)
    expected = (batch["observed"] & (batch["channels"] != CHANNEL)).sum(-1)
    assert torch.equal(black_box.seen[0], expected.repeat(3))
    assert (black_box.seen[0] < batch["observed"].sum(-1).repeat(3)).all()


def test_neuroevolution_lowers_the_loss():
    batch = make_batch(rows=1)
    module = Contimask(Window(), perturbation="deletion", n_channels=4, generations=30, popsize=20, samples=4)
    module.pgpe_history = []
    module.generator = torch.Generator().manual_seed(0)
    network = FourierMaskNetwork(1, 4, 16, 24)
    with torch.no_grad():
        target = module.f(batch["times"], batch["channels"], batch["values"], batch["observed"])
        before = module.losses(network(batch["times"]).expand(64, -1, -1, -1), batch, target, 1.0).mean()
        layers = module.fit_pgpe(network, batch, target)
        from trustlit.attribution.contimask import mlp_logits

        logits = mlp_logits(layers, fourier_features(batch["times"], 24))
        after = module.losses(logits.expand(64, -1, -1, -1), batch, target, 1.0).mean()
    assert after < 0.5 * before, (float(before), float(after))


def test_fit_writes_results_metrics_and_heatmap(tmp_path):
    batch = make_batch()
    loader = DataLoader([batch], batch_size=None)
    module = Contimask(Window(), perturbation="fade", n_channels=4, steps=60, plot_instances=2)
    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path)
    trainer.fit(module, train_dataloaders=loader)
    results = json.loads((tmp_path / "contimask.json").read_text())
    assert results["perturbation"] == "fade" and len(results["instances"]) == 2
    assert len(results["instances"][1]["saliency"]) == int(batch["observed"][1].sum())
    assert 0 <= results["auprc"] <= 1 and "train/auprc" in trainer.callback_metrics
    assert (tmp_path / "contimask_masks.png").stat().st_size > 0
    assert not module.black_box.training and not module.black_box.weight.requires_grad


def test_black_box_checkpoint_is_loaded(tmp_path):
    trained = Window()
    with torch.no_grad():
        trained.weight.fill_(3.0)
    torch.save({"state_dict": trained.state_dict()}, tmp_path / "box.ckpt")
    module = Contimask(Window(), black_box_checkpoint=str(tmp_path / "box.ckpt"))
    assert module.black_box.weight.item() == 3.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"perturbation": "noise"}, "perturbation='noise'"),
        ({"perturbation": "deletion", "optimizer": "adam"}, "optimizer='adam'"),
        ({"popsize": 7}, "popsize=7"),
        ({"lr": -1.0}, "lr=-1.0"),
        ({"black_box_checkpoint": "/nonexistent/box.ckpt"}, "no such file"),
    ],
)
def test_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Contimask(Window(), **arguments)


def test_bad_batches():
    batch = make_batch()
    unsorted = dict(batch, times=batch["times"].flip(-1))
    with pytest.raises(ValueError, match="not sorted"):
        explain(Contimask(Window(), steps=1), unsorted)
    missing = dict(batch, values=batch["values"].masked_fill(batch["observed"], torch.nan))
    with pytest.raises(ValueError, match="values is NaN"):
        explain(Contimask(Window(), steps=1), missing)
    with pytest.raises(ValueError, match="n_channels=2"):
        explain(Contimask(Window(), steps=1, n_channels=2), batch)
    with pytest.raises(ValueError, match="mask: shape"):
        gaussian_blur(batch["times"], batch["channels"], batch["values"], batch["observed"], torch.ones(2, 3))
    with pytest.raises(ValueError, match="outside"):
        fade(batch["values"], batch["observed"], torch.full_like(batch["values"], 2.0), batch["values"])
    with pytest.raises(ValueError, match="keep: dtype"):
        delete(batch["values"], batch["observed"], torch.ones_like(batch["values"]))


def test_recipe_black_box_keeps_its_own_hyperparameters_under_the_cli(tmp_path):
    """LightningCLI hands a nested LightningModule the outer model's hyperparameters; Contimask restores the black
    box's (mTAN's forward reads them), and the fit writes the results."""
    from trustlit.cli import run_cli

    recipe = Path(__file__).parents[1] / "recipes" / "attribution" / "contimask_rare_feature.yaml"
    tiny = {"num_samples": 20, "num_times": 10, "num_channels": 8, "num_salient": 2, "batch_size": 2}
    cli = run_cli(["fit", "-c", str(recipe), "--trainer.fast_dev_run=true", f"--trainer.default_root_dir={tmp_path}",
                   "--model.init_args.steps=2", "--model.init_args.n_channels=8",
                   "--model.init_args.black_box.init_args.num_channels=8",
                   *(f"--data.init_args.{key}={value}" for key, value in tiny.items())])  # fmt: skip
    box = cli.model.black_box
    assert box.hparams.num_channels == 8 and box.hparams.num_reference_points == 32
    assert "perturbation" not in box.hparams
    assert len(json.loads((tmp_path / "contimask.json").read_text())["instances"]) == 2


def test_only_deletion_reveals_informative_missingness():
    """The released count white box (how many salient observations exist) ignores the values: blur and fade cannot
    change it, so their masks carry no signal; deletion finds the counted observations."""
    from trustlit.irregular_classifiers import RareFeatureOracle

    box = RareFeatureOracle(salient_channels=[CHANNEL], window=WINDOW, mode="count")
    batch = make_batch()
    fade_mask = explain(Contimask(box, perturbation="fade", n_channels=4, steps=100), batch)
    deletion = explain(Contimask(box, perturbation="deletion", n_channels=4, generations=30, popsize=20), batch)
    fade_in, fade_out = concentration(fade_mask)
    deletion_in, deletion_out = concentration(deletion)
    assert abs(fade_in - fade_out) < 0.05 and deletion_in > 0.3 and deletion_out < 0.05
