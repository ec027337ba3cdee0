"""Saliency metrics (closed forms), removal curves and ERASER scores, and the baselines (Dynamask on a grid,
Integrated Gradients, occlusion) on the one-window black box of tests/test_contimask.py."""

from __future__ import annotations

import pytest
import torch
from test_contimask import Window, make_batch

from trustlit.attribution.saliency import (
    aup,
    auprc,
    aur,
    dynamask_grid,
    eraser_scores,
    integrated_gradients,
    occlusion,
    removal_curves,
    saliency_metrics,
    time_bins,
    top_fraction,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_aup_aur_closed_form():
    scores, truth = torch.tensor([0.9, 0.6, 0.3]), torch.tensor([True, False, True])
    # precision(0.3, 0.6, 0.9) = (2/3, 1/2, 1), recall = (1, 1/2, 1/2), steps of 0.3
    assert aup(scores, truth) == pytest.approx(0.3 * (2 / 3 + 1 / 2) / 2 + 0.3 * (1 / 2 + 1) / 2)
    assert aur(scores, truth) == pytest.approx(0.3 * (1 + 1 / 2) / 2 + 0.3 * (1 / 2 + 1 / 2) / 2)


def test_auprc_perfect_reversed_and_closed_form():
    truth = torch.tensor([True, True, False, False])
    assert auprc(torch.tensor([4.0, 3.0, 2.0, 1.0]), truth) == pytest.approx(1.0)
    # reversed: the positives come 3rd and 4th, precision 1/3 and 2/4 there
    assert auprc(torch.tensor([1.0, 2.0, 3.0, 4.0]), truth) == pytest.approx((1 / 3 + 2 / 4) / 2)


def test_saliency_metrics_average_over_instances_with_a_salient_observation():
    scores = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5])]
    truths = [torch.tensor([True, False]), torch.tensor([True, False]), torch.tensor([False, False])]
    metrics = saliency_metrics(scores, truths)
    assert metrics["n_scored"] == 2 and metrics["auprc"] == pytest.approx((1.0 + 0.5) / 2)


def test_top_fraction_counts_per_row():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.3, 0.2, 0.1, 0.0]])
    observed = torch.tensor([[True, True, True, True], [True, True, False, False]])
    top = top_fraction(scores, observed, 0.5)
    assert top.tolist() == [[False, True, False, True], [True, False, False, False]]


def test_true_ordering_beats_a_random_one_on_removal_curves():
    batch = make_batch(rows=4, length=60, seed=1)
    batch["values"] = batch["values"].abs() * batch["observed"]  # every window value raises the class-1 logit
    black_box = Window()
    truth = removal_curves(black_box, batch, batch["saliency"].float() + 1e-3 * torch.rand(4, 60), (0.1, 0.2, 0.5))
    random = removal_curves(black_box, batch, torch.rand(4, 60, generator=torch.Generator().manual_seed(0)),
                            (0.1, 0.2, 0.5))  # fmt: skip
    assert (truth["deletion"].mean(0) < random["deletion"].mean(0)).all()
    assert eraser_scores(truth)["comprehensiveness"] > eraser_scores(random)["comprehensiveness"]
    assert eraser_scores(truth)["sufficiency"] < eraser_scores(random)["sufficiency"]


def test_eraser_scores_closed_form():
    curves = {
        "full": torch.tensor([0.9]),
        "deletion": torch.tensor([[0.5, 0.3]]),
        "insertion": torch.tensor([[0.8, 0.9]]),
    }
    scores = eraser_scores(curves)
    assert scores["comprehensiveness"] == pytest.approx((0.4 + 0.6) / 2)
    assert scores["sufficiency"] == pytest.approx((0.1 + 0.0) / 2)


@pytest.mark.parametrize("method", [integrated_gradients, occlusion])
def test_gradient_and_occlusion_are_zero_outside_what_the_black_box_reads(method):
    batch = make_batch()
    saliency = method(Window(), batch)
    assert saliency.shape == batch["values"].shape
    assert (saliency[~batch["saliency"]] == 0).all()
    assert saliency[batch["saliency"]].max() == pytest.approx(1.0)


@pytest.mark.parametrize("perturbation", ["blur", "fade"])
def test_dynamask_grid_concentrates_on_the_window(perturbation):
    batch = make_batch()
    fraction = float(batch["saliency"].sum() / batch["observed"].sum())
    saliency = dynamask_grid(Window(), batch, n_bins=10, n_channels=4, perturbation=perturbation, n_epochs=150,
                             keep_ratio=max(fraction, 0.05))  # fmt: skip
    inside, outside = saliency[batch["saliency"]].mean(), saliency[batch["observed"] & ~batch["saliency"]].mean()
    assert inside > 0.5 and outside < 0.1, (float(inside), float(outside))


def test_time_bins():
    times = torch.tensor([[0.2, 0.45, 0.6, 1.2]])  # span 0.4: bins of 0.1
    observed = torch.tensor([[True, True, True, False]])
    assert time_bins(times, observed, 4)[0, :3].tolist() == [0, 2, 3]


def test_bad_input():
    batch = make_batch()
    with pytest.raises(ValueError, match="scores: shape"):
        aup(torch.ones(3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="no salient observation"):
        auprc(torch.ones(3), torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="scores: shape"):
        removal_curves(Window(), batch, torch.ones(2, 3))
    with pytest.raises(ValueError, match="fractions"):
        removal_curves(Window(), batch, torch.ones_like(batch["values"]), (0.5, 1.5))
    with pytest.raises(ValueError, match=r"keep_ratio=1\.5"):
        dynamask_grid(Window(), batch, keep_ratio=1.5)
    with pytest.raises(ValueError, match="perturbation='noise'"):
        dynamask_grid(Window(), batch, perturbation="noise")
    with pytest.raises(ValueError, match="not sorted"):
        occlusion(Window(), dict(batch, times=batch["times"].flip(-1)))
