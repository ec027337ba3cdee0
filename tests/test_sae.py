"""Sparse autoencoders (trustlit.interpret.sae): the MP encoder against hand computations, the sparsity of
each variant, the metrics' closed forms, unit-norm atoms through training, learning on synthetic
hierarchical data, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import quiet_trainer

from trustlit.data.hierarchy import HierarchicalFeaturesDataModule
from trustlit.interpret.sae import (
    BatchTopKSAE,
    JumpReLUSAE,
    MatchingPursuitSAE,
    ReLUSAE,
    TopKSAE,
    feature_recovery,
    fvu,
    geometric_median,
    revive_loss,
    topk_auxiliary_loss,
)
from trustlit.interpret.sae.jumprelu import jumprelu, step
from trustlit.interpret.sae.metrics import fvu_from_sums, matching_pursuit, mean_l0

pytestmark = pytest.mark.usefixtures("one_thread")


VARIANTS = {
    "MatchingPursuitSAE": (MatchingPursuitSAE, {"k": 4}),
    "TopKSAE": (TopKSAE, {"k": 4}),
    "BatchTopKSAE": (BatchTopKSAE, {"k": 4}),
    "ReLUSAE": (ReLUSAE, {"l1_coefficient": 0.05}),
    "JumpReLUSAE": (JumpReLUSAE, {"l0_coefficient": 0.01}),
}


def orthonormal(n: int, seed: int = 0) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)).Q


def hand_matching_pursuit(x: np.ndarray, dictionary: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Matching pursuit written out one sample and one step at a time, in float64."""
    codes, residuals = np.zeros((len(x), len(dictionary))), np.zeros_like(x)
    for b, sample in enumerate(x):
        residual = sample.copy()
        for _ in range(k):
            correlations = [float(np.dot(atom, residual)) for atom in dictionary]
            j = int(np.argmax(correlations))
            codes[b, j] += correlations[j]
            residual = residual - correlations[j] * dictionary[j]
        residuals[b] = residual
    return codes, residuals


# --- matching pursuit -----------------------------------------------------------------------------


@pytest.mark.parametrize("gram", [False, True])
def test_mp_on_an_orthonormal_dictionary_recovers_a_k_sparse_code_exactly(gram):
    dictionary = orthonormal(8).float()
    sae = MatchingPursuitSAE(8, 8, k=3, gram=gram)
    sae.dictionary = dictionary
    with torch.no_grad():
        sae.b_pre.copy_(torch.linspace(-1, 1, 8))
    z = torch.zeros(4, 8)
    z[0, [1, 4, 6]] = torch.tensor([3.0, 2.0, 0.5])
    z[1, [0, 2, 7]] = torch.tensor([1.0, 1.5, 2.5])
    z[2, [3, 5, 6]] = torch.tensor([0.7, 0.2, 4.0])
    z[3, [2, 3, 4]] = torch.tensor([1.1, 1.2, 1.3])
    x = z @ dictionary + sae.b_pre.detach()
    codes = sae.encode(x)
    torch.testing.assert_close(codes, z, atol=1e-5, rtol=0)
    torch.testing.assert_close(sae.decode(codes), x, atol=1e-5, rtol=0)


@pytest.mark.parametrize("gram", [False, True])
def test_mp_on_a_non_orthogonal_dictionary_equals_a_step_by_step_hand_computation(gram):
    generator = torch.Generator().manual_seed(1)
    dictionary = torch.nn.functional.normalize(torch.randn(12, 5, generator=generator, dtype=torch.float64), dim=-1)
    x = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    result = matching_pursuit(x, dictionary, k=7, gram=gram)
    codes, residuals = hand_matching_pursuit(x.numpy(), dictionary.numpy(), k=7)
    np.testing.assert_allclose(result.codes.numpy(), codes, atol=1e-10)
    np.testing.assert_allclose(result.residual.numpy(), residuals, atol=1e-10)
    assert (result.atoms[:, 0] != result.atoms[:, 1]).all(), "a picked atom is orthogonal to the next residual"


def test_mp_residual_norms_decrease_monotonically_and_match_the_residual():
    generator = torch.Generator().manual_seed(2)
    dictionary = torch.nn.functional.normalize(torch.randn(64, 16, generator=generator), dim=-1)
    x = torch.randn(32, 16, generator=generator)
    result = matching_pursuit(x, dictionary, k=20)
    norms = result.residual_norms
    assert norms.shape == (32, 21)
    assert (norms[:, 1:] <= norms[:, :-1] + 1e-5).all()
    assert (norms[:, -1] < 0.5 * norms[:, 0]).all()
    # each step removes exactly c_j^2 from ||r||^2 (unit atoms)
    torch.testing.assert_close(norms[:, :-1] - norms[:, 1:], result.coefficients.square(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(norms[:, -1], result.residual.square().sum(-1))


@pytest.mark.parametrize("tau", [0.5, 0.2, 0.05])
def test_adaptive_stopping_stops_each_input_at_the_threshold(tau):
    generator = torch.Generator().manual_seed(3)
    sae = MatchingPursuitSAE(16, 64, k=4)
    x = torch.randn(40, 16, generator=generator) * torch.linspace(0.2, 3.0, 40).unsqueeze(-1)
    result = sae.pursue(x, k=60, residual_threshold=tau)
    ratio = result.residual_norms / result.residual_norms[:, :1]
    taken = (result.coefficients != 0).sum(dim=-1)
    assert (ratio[:, -1] < tau).all(), "60 steps reach every threshold here"
    for b in range(len(x)):
        first_below = int((ratio[b] < tau).nonzero()[0])  # the first t with ||r_t||^2 / ||r_0||^2 < tau
        assert taken[b] == first_below
        assert (result.coefficients[b, first_below:] == 0).all(), "a stopped input stops changing"
        assert ratio[b, first_below - 1] >= tau
    assert len(set(taken.tolist())) > 1, "sparsity is chosen per input"
    # up to its stopping step, an input's codes are those of the plain k-step pursuit
    for b in range(5):
        plain = sae.encode(x[b : b + 1], k=int(taken[b]))
        torch.testing.assert_close(plain[0], result.codes[b])
    assert sae.encode(x, residual_threshold=tau).shape == (40, 64)


def test_adaptive_stopping_with_a_larger_k_than_trained_and_the_default_cap():
    sae = MatchingPursuitSAE(8, 32, k=2)
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(4))
    assert (sae.encode(x) != 0).sum(-1).max() <= 2
    result = sae.pursue(x, residual_threshold=1e-3)
    assert result.coefficients.shape[1] <= 8  # min(d_in, n_latents)
    assert (result.residual_norms[:, -1] / result.residual_norms[:, 0] < 1e-3).any() or result.atoms.shape[1] == 8


# --- sparsity of the other variants ---------------------------------------------------------------


def test_topk_keeps_exactly_k_per_sample():
    sae = TopKSAE(16, 128, k=5)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(5))
    z = sae.encode(x)
    assert ((z != 0).sum(-1) == 5).all()
    pre = sae.pre_activations(x)
    kept = torch.where(z != 0, pre, torch.full_like(pre, -torch.inf)).amax(-1)
    dropped = torch.where(z == 0, pre, torch.full_like(pre, -torch.inf)).amax(-1)
    assert (kept >= dropped).all() and torch.equal(z[z != 0], pre[z != 0])


def test_batch_topk_keeps_k_per_sample_on_average_and_thresholds_at_inference():
    sae = BatchTopKSAE(16, 128, k=5)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(6))
    out = sae.training_forward(x)
    per_sample = (out.codes != 0).sum(-1)
    assert per_sample.sum() == 5 * 64 and per_sample.float().mean() == 5
    assert per_sample.min() < per_sample.max(), "the budget is shared across the batch"
    assert sae.threshold == out.codes[out.codes > 0].min()
    sae.eval()
    z = sae.encode(x)
    pre = sae.pre_activations(x)
    assert torch.equal(z, pre * (pre > sae.threshold))


def test_relu_l1_and_jumprelu_l0_terms_are_the_closed_forms():
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(7))
    relu = ReLUSAE(6, 10, l1_coefficient=0.3)
    out = relu.training_forward(x)
    torch.testing.assert_close(out.terms["l1"], 0.3 * relu.encode(x).sum(-1).mean())
    jump = JumpReLUSAE(6, 10, l0_coefficient=0.2, threshold_init=0.1)
    out = jump.training_forward(x)
    h = jump.pre_activations(x)
    torch.testing.assert_close(out.terms["l0_penalty"], 0.2 * (h > 0.1).float().sum(-1).mean())
    torch.testing.assert_close(out.codes, h * (h > 0.1))


def test_jumprelu_pseudo_derivatives_are_the_rectangle_kernel_estimates():
    h = torch.tensor([[0.09, 0.1004, 0.5], [0.0996, 0.2, -1.0]], requires_grad=True)
    theta = torch.tensor([0.1, 0.1, 0.1], requires_grad=True)
    epsilon = 0.001
    jumprelu(h, theta, epsilon).sum().backward()
    # K((h - theta)/eps) = 1 for |h - theta| < eps/2: entries (0,1) and (1,0)
    assert torch.allclose(theta.grad, torch.tensor([-0.1 / epsilon, -0.1 / epsilon, 0.0]))
    assert torch.equal(h.grad, (h > theta).float())
    theta.grad = None
    h.grad = None
    step(h, theta, epsilon).sum().backward()
    assert torch.allclose(theta.grad, torch.tensor([-1 / epsilon, -1 / epsilon, 0.0]))
    assert h.grad is None


# --- metrics ------------------------------------------------------------------------------------


def test_fvu_and_l0_closed_forms():
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    x_hat = torch.tensor([[1.0, 1.0], [3.0, 2.0]])
    # variance around the mean (2, 1): 1 + 1 + 1 + 1 = 4; error 1
    assert fvu(x, x_hat) == 0.25
    assert fvu(x, x.mean(0, keepdim=True).expand_as(x)) == 1.0
    torch.testing.assert_close(fvu_from_sums(torch.tensor(1.0), x.sum(0), x.square().sum(), 2), torch.tensor(0.25))
    assert mean_l0(torch.tensor([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0]])) == 1.0


def test_geometric_median_and_feature_recovery():
    points = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [100.0, 100.0]])
    median = geometric_median(points)
    mean_distance = lambda c: (points - c).norm(dim=-1).sum()  # noqa: E731
    assert mean_distance(median) < mean_distance(points.mean(0))
    assert median.norm() < 1.0, "robust to the outlier"
    features = torch.eye(3)
    atoms = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    torch.testing.assert_close(feature_recovery(atoms, features), torch.tensor((1 + 2 * math.sqrt(0.5)) / 3))


def test_revive_loss_is_the_reference_term():
    dictionary = torch.eye(16)[:14]
    residual = torch.arange(32.0).view(2, 16)
    codes = torch.zeros(2, 14)
    codes[:, :2] = 1.0  # 12 dead atoms (> 10)
    expected = -(residual @ dictionary[2:].T).mean()
    torch.testing.assert_close(revive_loss(residual, dictionary, codes), expected)
    codes[:, :4] = 1.0  # 10 dead: not more than min_dead
    assert revive_loss(residual, dictionary, codes) == 0


def test_topk_auxiliary_loss_uses_only_dead_latents():
    dictionary = torch.eye(4)
    residual = torch.tensor([[1.0, 2.0, 0.0, 0.0]])
    pre = torch.tensor([[5.0, 1.5, 0.5, 9.0]])
    dead = torch.tensor([False, True, True, False])
    # k_aux = 1 of the 2 dead: latent 1 (1.5) predicts [0, 1.5, 0, 0]; scale min(2 / 1, 1) = 1
    torch.testing.assert_close(topk_auxiliary_loss(residual, pre, dictionary, dead, k_aux=1), torch.tensor(1.25))
    assert topk_auxiliary_loss(residual, pre, dictionary, torch.zeros(4, dtype=torch.bool), 1) == 0


# --- training -----------------------------------------------------------------------------------


def synthetic(**kwargs) -> HierarchicalFeaturesDataModule:
    sizes = {"dim": 32, "num_parents": 8, "children_per_parent": 3, "num_train": 4096, "num_val": 512}
    return HierarchicalFeaturesDataModule(**{**sizes, "batch_size": 128, **kwargs})


def evaluate(sae, data) -> tuple[float, float]:
    sae.eval()
    with torch.no_grad():
        x = data.val_x
        z = sae.encode(x)
        result = fvu(x, sae.decode(z)).item(), feature_recovery(sae.dictionary, data.features).item()
    sae.train()
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_lowers_fvu_on_synthetic_data_and_keeps_unit_atoms(name):
    cls, kwargs = VARIANTS[name]
    data = synthetic()
    sae = cls(32, 64, lr=3e-3, **kwargs)
    fvu_before, recovery_before = evaluate(sae, data)
    quiet_trainer(max_steps=150).fit(sae, data)
    fvu_after, recovery_after = evaluate(sae, data)
    assert fvu_after < 0.3 * fvu_before and fvu_after < 0.2, (fvu_before, fvu_after)
    torch.testing.assert_close(sae.dictionary.norm(dim=-1), torch.ones(64))
    assert sae.b_pre_initialised and sae.tokens_seen == 150 * 128
    if name == "MatchingPursuitSAE":
        assert recovery_after > recovery_before + 0.25, (recovery_before, recovery_after)


def test_a_training_step_removes_the_gradient_along_each_atom_and_renormalises():
    data = synthetic(num_train=256)
    sae = MatchingPursuitSAE(32, 48, k=3, lr=0.5)
    seen = {}

    original = sae.on_before_optimizer_step

    def record(optimizer):
        original(optimizer)
        seen["parallel"] = (sae.W_dec.grad * sae.W_dec).sum(-1).abs().max().item()

    sae.on_before_optimizer_step = record
    quiet_trainer(max_steps=2).fit(sae, data)
    assert seen["parallel"] < 1e-6
    torch.testing.assert_close(sae.dictionary.norm(dim=-1), torch.ones(48))


def test_dead_fraction_counts_atoms_unused_over_the_window():
    sae = TopKSAE(4, 6, k=1, dead_window_tokens=10)
    z = torch.zeros(4, 6)
    z[:, 0] = 1.0
    assert sae.track_firing(z).tolist() == [False, True, True, True, True, True]  # 4 tokens seen: window 4
    z = torch.zeros(8, 6)
    z[:, 1] = 1.0
    # atom 0 last fired 8 tokens ago (< 10), atoms 2.. never in 12 tokens (>= 10)
    assert sae.track_firing(z).tolist() == [False, False, True, True, True, True]


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MatchingPursuitSAE, TopKSAE, BatchTopKSAE])
def test_k_larger_than_the_dictionary_is_one_line_naming_k_and_n_latents(cls):
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: k=9 is larger than the dictionary \(n_latents=8\)"):
        cls(4, 8, k=9)


def test_mp_encode_refuses_a_k_or_threshold_out_of_range():
    sae = MatchingPursuitSAE(4, 8, k=2)
    with pytest.raises(ValueError, match=r"k=20 is larger than the dictionary \(n_latents=8\)"):
        sae.encode(torch.randn(2, 4), k=20)
    with pytest.raises(ValueError, match=r"residual_threshold=1.5, expected a number in \(0, 1\]"):
        sae.encode(torch.randn(2, 4), residual_threshold=1.5)


def test_bad_hyperparameters_and_dictionaries_are_refused():
    with pytest.raises(ValueError, match=r"^ReLUSAE: l1_coefficient=-1.0 is invalid, expected a number >= 0$"):
        ReLUSAE(4, 8, l1_coefficient=-1.0)
    with pytest.raises(ValueError, match=r"^TopKSAE: n_latents=0 is invalid, expected an integer > 0$"):
        TopKSAE(4, 0, k=1)
    sae = TopKSAE(4, 8, k=2)
    with pytest.raises(
        ValueError, match=r"a dictionary of shape \[4, 8\] was assigned, expected \[n_latents, d_in\] = \[8, 4\]"
    ):
        sae.dictionary = torch.randn(4, 8)
    sae.dictionary = 3 * torch.eye(8, 4)[[0, 1, 2, 3, 0, 1, 2, 3]]
    torch.testing.assert_close(sae.dictionary.norm(dim=-1), torch.ones(8))


def test_a_batch_of_the_wrong_width_names_the_shapes():
    sae = MatchingPursuitSAE(16, 32, k=2)
    with pytest.raises(
        ValueError, match=r"^MatchingPursuitSAE: a batch of activations of shape \[3, 12\], expected \[B, d_in=16\]$"
    ):
        sae.training_step({"activations": torch.randn(3, 12)}, 0)


def test_a_datamodule_of_the_wrong_width_is_refused_before_training():
    data = synthetic(dim=24, children_per_parent=2)
    with pytest.raises(
        ValueError, match=r"HierarchicalFeaturesDataModule: activations of width 24, but TopKSAE has d_in=32"
    ):
        quiet_trainer(max_steps=1).fit(TopKSAE(32, 64, k=2), data)
