from __future__ import annotations

import math

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from scipy.optimize import minimize

from trustlit.data.tabular import TabularDataModule
from trustlit.privacy.dpsgd import DPSGD
from trustlit.privacy.mechanisms import analytic_gaussian_sigma, classic_gaussian_sigma
from trustlit.privacy.pmsvm import PMSVM
from trustlit.privacy.svm import (
    binary_hinge_objective,
    crammer_singer_hinge,
    crammer_singer_margins,
    crammer_singer_objective,
    crammer_singer_sensitivity,
    fit_binary_hinge_svm,
    fit_crammer_singer,
    fit_one_vs_rest,
    one_vs_rest_sensitivity,
    smoothed_crammer_singer_loss,
)

# -- helpers -------------------------------------------------------------------------------


def unit_ball_data(rng: np.random.Generator, n: int, d: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, d))
    X *= rng.uniform(0.3, 1.0, size=(n, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    return X, rng.integers(0, c, size=n)


def crammer_singer_by_slsqp(X: np.ndarray, y: np.ndarray, c: int, lam: float) -> np.ndarray:
    """The CS primal as a QP in (W, xi): min lam/2 ||W||^2 + mean(xi), xi_i >= m_k + (w_k - w_y) x_i, by SLSQP."""
    n, d = X.shape
    rows, bounds = [], []
    for i in range(n):
        for k in range(c):
            row = np.zeros(c * d + n)
            row[c * d + i] = 1.0
            row[k * d : (k + 1) * d] -= X[i]
            row[y[i] * d : (y[i] + 1) * d] += X[i]
            rows.append(row)
            bounds.append(0.0 if k == y[i] else 1.0)
    A, b = np.array(rows), np.array(bounds)

    def objective(z):
        return 0.5 * lam * z[: c * d] @ z[: c * d] + z[c * d :].mean()

    def gradient(z):
        return np.concatenate([lam * z[: c * d], np.full(n, 1.0 / n)])

    constraint = {"type": "ineq", "fun": lambda z: A @ z - b, "jac": lambda z: A}
    result = minimize(
        objective,
        np.ones(c * d + n),
        jac=gradient,
        constraints=[constraint],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    assert result.success, result.message
    return result.x[: c * d].reshape(c, d)


def make_trainer(**kwargs) -> L.Trainer:
    defaults = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_epochs=1,
    )
    return L.Trainer(**{**defaults, **kwargs})


def training_split(data: TabularDataModule) -> tuple[np.ndarray, np.ndarray]:
    data.setup("fit")
    x, y, _ = data.splits["train"].tensors
    return x.double().numpy(), y.numpy()


# -- the exact solvers ---------------------------------------------------------------------


def test_crammer_singer_objective_by_hand():
    W = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    X = np.array([[0.5, 0.0], [0.0, 0.0], [0.3, 0.4]])
    y = np.array([0, 2, 1])
    # scores: [0.5, 0, -0.5], [0, 0, 0], [0.3, 0.4, -0.7]
    # losses: max(0, 1 + 0 - 0.5) = 0.5; max(0, 1 + 0 - 0) = 1; max(0, 1 + 0.3 - 0.4) = 0.9
    expected = 0.5 * 0.1 * 4.0 + (0.5 + 1.0 + 0.9) / 3
    assert crammer_singer_objective(W, X, y, 0.1) == pytest.approx(expected, rel=1e-14)
    scores = torch.as_tensor(X @ W.T)
    torch.testing.assert_close(
        crammer_singer_hinge(scores, torch.as_tensor(y)), torch.tensor([0.5, 1.0, 0.9], dtype=torch.float64)
    )


@pytest.mark.parametrize(
    ("c", "labels"),
    [(3, None), (4, [0, 1, 2]), (2, None)],
    ids=["three-classes", "a-class-absent-from-the-data", "two-classes"],
)
def test_crammer_singer_solver_matches_an_independent_qp(c, labels):
    rng = np.random.default_rng(1)
    X, y = unit_ball_data(rng, 24, 3, c)
    if labels is not None:
        y = rng.choice(labels, size=len(y))
    lam = 0.05
    ours, reference = fit_crammer_singer(X, y, c, lam), crammer_singer_by_slsqp(X, y, c, lam)
    assert ours.shape == (c, 3)
    assert crammer_singer_objective(ours, X, y, lam) == pytest.approx(
        crammer_singer_objective(reference, X, y, lam), abs=1e-8
    )
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    if labels is not None:
        assert np.linalg.norm(ours[3]) > 1e-3, "an absent class still enters every max: its row is not zero"


def test_crammer_singer_solution_beats_every_perturbation():
    rng = np.random.default_rng(2)
    X, y = unit_ball_data(rng, 200, 8, 5)
    lam = 0.01
    W = fit_crammer_singer(X, y, 5, lam)
    best = crammer_singer_objective(W, X, y, lam)
    for _ in range(40):
        direction = rng.normal(size=W.shape)
        for step in (1e-4, 1e-2):
            assert crammer_singer_objective(W + step * direction, X, y, lam) >= best - 1e-10
    # float32 tensors from a DataModule give the same solution
    from_tensors = fit_crammer_singer(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y), 5, lam)
    np.testing.assert_allclose(from_tensors, fit_crammer_singer(X.astype(np.float32), y, 5, lam), atol=1e-8)


def test_above_the_threshold_every_margin_is_violated_and_w_scales_as_one_over_lambda():
    """All hinges active: F = lam/2 ||W||^2 + 1 + g(W) with g positively homogeneous, so W(lam) = V* / lam, and
    that holds for lam > lam* = max_i margin_i(V*) (docs/methods/pmsvm.md); weight-perturbation noise is ∝ 1/lam."""
    rng = np.random.default_rng(0)
    n, d, c = 200, 10, 4
    y = rng.integers(0, c, size=n)
    X = rng.normal(size=(c, d))[y] + rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)  # unit-norm rows

    def violated(W: np.ndarray) -> torch.Tensor:  # hinge > 0: the margin w_y x - max_{k != y} w_k x is below 1
        return crammer_singer_hinge(torch.as_tensor(X @ W.T), torch.as_tensor(y)) > 0

    scaled = {lam: lam * fit_crammer_singer(X, y, c, lam) for lam in (1.0, 10.0)}
    assert all(violated(v / lam).all() for lam, v in scaled.items())
    np.testing.assert_allclose(scaled[1.0], scaled[10.0], atol=1e-8)  # lam1 W1 == lam2 W2
    v_star = scaled[10.0]
    # lam*: the margins of V* / lam are those of V* over lam
    threshold = float(crammer_singer_margins(torch.as_tensor(X @ v_star.T), torch.as_tensor(y)).max())
    assert 0.05 < threshold < 1.0  # the case has a threshold inside the tested range
    above = fit_crammer_singer(X, y, c, 1.01 * threshold)
    assert violated(above).all()
    np.testing.assert_allclose(1.01 * threshold * above, v_star, atol=1e-7)
    below = fit_crammer_singer(X, y, c, 0.5 * threshold)
    assert 0 < int((~violated(below)).sum()) < n  # some margins are met, so the scaling breaks
    assert np.abs(0.5 * threshold * below - v_star).max() > 1e-2
    # PMSVM-WP: sigma ∝ Delta ∝ 1/lam too, so one noise draw Z gives the same predictions at every lam > lam*
    noise = rng.normal(size=v_star.shape)
    predictions = [
        np.argmax(X @ (v / lam + analytic_gaussian_sigma(1.0, 1e-5, crammer_singer_sensitivity(n, lam)) * noise).T, 1)
        for lam, v in scaled.items()
    ]
    np.testing.assert_array_equal(predictions[0], predictions[1])


def binary_hinge_by_slsqp(X: np.ndarray, t: np.ndarray, lam: float) -> np.ndarray:
    """The binary hinge SVM as a QP in (w, xi): min lam/2 ||w||^2 + mean(xi), t_i w.x_i + xi_i >= 1, xi >= 0."""
    n, d = X.shape
    A = np.hstack([t[:, None] * X, np.eye(n)])
    result = minimize(
        lambda z: 0.5 * lam * z[:d] @ z[:d] + z[d:].mean(),
        np.ones(d + n),
        jac=lambda z: np.concatenate([lam * z[:d], np.full(n, 1.0 / n)]),
        constraints=[{"type": "ineq", "fun": lambda z: A @ z - 1, "jac": lambda z: A}],
        bounds=[(None, None)] * d + [(0, None)] * n,
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    assert result.success, result.message
    return result.x[:d]


def test_binary_and_one_vs_rest_solvers_match_an_independent_qp():
    rng = np.random.default_rng(3)
    X, y = unit_ball_data(rng, 30, 3, 3)
    lam = 0.05
    for k in range(3):
        t = np.where(y == k, 1.0, -1.0)
        w, reference = fit_binary_hinge_svm(X, t, lam), binary_hinge_by_slsqp(X, t, lam)
        assert binary_hinge_objective(w, X, t, lam) == pytest.approx(
            binary_hinge_objective(reference, X, t, lam), abs=1e-8
        )
        np.testing.assert_allclose(w, reference, atol=1e-5)
        np.testing.assert_allclose(fit_one_vs_rest(X, y, 3, lam)[k], w, atol=1e-12)
    # a class absent from the data: its classifier sees only t = -1
    absent = fit_one_vs_rest(X, np.where(y == 2, 0, y), 3, lam)
    np.testing.assert_allclose(absent[2], fit_binary_hinge_svm(X, -np.ones(len(y)), lam), atol=1e-12)


def test_smoothed_hinge_bounds_limit_gradient_and_closed_form():
    generator = torch.Generator().manual_seed(0)
    scores = 5 * torch.randn(256, 6, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 6, (256,), generator=generator)
    hinge = crammer_singer_hinge(scores, y)
    for h in (0.1, 0.5, 1.0, 3.0):
        smooth = smoothed_crammer_singer_loss(scores, y, h)
        assert smooth.shape == (256,)
        assert torch.all(hinge <= smooth + 1e-12) and torch.all(smooth <= hinge + h * math.log(6) + 1e-12)
    torch.testing.assert_close(smoothed_crammer_singer_loss(scores, y, 1e-4), hinge, atol=1e-4 * math.log(6), rtol=0)
    # two classes: h * softplus((1 + s_other - s_y) / h)
    two = torch.tensor([[0.3, -0.2], [1.0, 2.5]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    expected = 0.5 * torch.nn.functional.softplus(
        torch.tensor([1 - 0.2 - 0.3, 1 + 1.0 - 2.5], dtype=torch.float64) / 0.5
    )
    torch.testing.assert_close(smoothed_crammer_singer_loss(two, labels, 0.5), expected)
    # per-sample gradient in the scores has norm <= sqrt(2), so the loss is sqrt(2)-Lipschitz in W for ||x|| <= 1
    scores.requires_grad_(True)
    (gradient,) = torch.autograd.grad(smoothed_crammer_singer_loss(scores, y, 0.2).sum(), scores)
    assert gradient.norm(dim=1).max().item() <= math.sqrt(2) + 1e-12
    assert gradient.norm(dim=1).max().item() > 1.3, "the bound is nearly attained by confidently wrong samples"
    with pytest.raises(ValueError, match="smoothing"):
        smoothed_crammer_singer_loss(scores, y, 0.0)


# -- sensitivity -----------------------------------------------------------------------------


def test_sensitivity_constants():
    assert crammer_singer_sensitivity(100, 0.01) == pytest.approx(2 * math.sqrt(2) / (100 * 0.01), rel=1e-15)
    assert one_vs_rest_sensitivity(100, 0.01) == pytest.approx(2 / (100 * 0.01), rel=1e-15)
    with pytest.raises(ValueError, match="lam"):
        crammer_singer_sensitivity(10, 0.0)


def adversarial_neighbours(X, W, j, c):
    """Replacements for sample j: the opposite direction, and the unit directions +-(w_a - w_b), with every label."""
    directions = [-X[j] / np.linalg.norm(X[j])]
    for a in range(c):
        for b in range(a + 1, c):
            v = W[a] - W[b]
            if np.linalg.norm(v) > 0:
                directions += [v / np.linalg.norm(v), -v / np.linalg.norm(v)]
    return [(x, label) for x in directions for label in range(c)]


def test_empirical_sensitivity_never_exceeds_the_bound():
    rng = np.random.default_rng(4)
    ratios = []
    for trial in range(8):
        n, d, c = int(rng.integers(6, 12)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
        lam = [0.02, 0.2, 2.0][trial % 3]
        X, y = unit_ball_data(rng, n, d, c)
        W = fit_crammer_singer(X, y, c, lam)
        bound = crammer_singer_sensitivity(n, lam)
        for j in range(0, n, 3):
            for x_new, y_new in adversarial_neighbours(X, W, j, c):
                X2, y2 = X.copy(), y.copy()
                X2[j], y2[j] = x_new, y_new
                ratios.append(np.linalg.norm(W - fit_crammer_singer(X2, y2, c, lam)) / bound)
    worst = max(ratios)
    assert worst <= 1 + 1e-6, f"||W(D) - W(D')|| / (2 sqrt(2) / (n lam)) reached {worst:.6f} over {len(ratios)} pairs"
    assert worst > 0.5, f"the adversarial neighbours are too weak to test the bound (max ratio {worst:.4f})"


def test_sensitivity_bound_is_attained_so_it_cannot_be_halved():
    # two classes and a large lam keep every hinge active: W = -(1/(n lam)) sum_i x_i (e_{1-y_i} - e_{y_i})^T, and
    # flipping one label flips that sample's term, moving W by 2 sqrt(2) ||x|| / (n lam): exactly the bound
    rng = np.random.default_rng(5)
    n, lam = 10, 50.0
    X, y = unit_ball_data(rng, n, 3, 2)
    X[0] /= np.linalg.norm(X[0])
    y2 = y.copy()
    y2[0] = 1 - y[0]
    difference = fit_crammer_singer(X, y, 2, lam) - fit_crammer_singer(X, y2, 2, lam)
    ratio = np.linalg.norm(difference) / crammer_singer_sensitivity(n, lam)
    assert 0.99 < ratio <= 1 + 1e-6, f"ratio {ratio:.6f}: the bound is attained, so half the constant would be violated"


def test_one_vs_rest_sensitivity_holds_on_a_flipped_sample():
    rng = np.random.default_rng(6)
    X, _ = unit_ball_data(rng, 12, 3, 2)
    X[0] /= np.linalg.norm(X[0])
    t = rng.choice([-1.0, 1.0], size=12)
    lam = 20.0
    t2 = t.copy()
    t2[0] = -t[0]
    ratio = np.linalg.norm(
        fit_binary_hinge_svm(X, t, lam) - fit_binary_hinge_svm(X, t2, lam)
    ) / one_vs_rest_sensitivity(12, lam)
    assert 0.99 < ratio <= 1 + 1e-6


# -- PMSVM through a Lightning Trainer -----------------------------------------------------


def digits() -> TabularDataModule:
    return TabularDataModule("digits", row_norm="normalize", batch_size=256)


def test_weight_perturbation_with_huge_epsilon_releases_the_exact_solution():
    data, lam = digits(), 0.01
    X, y = training_split(data)
    model = PMSVM("weight", num_features=64, num_classes=10, epsilon=1e6, delta=1e-5, lam=lam, seed=0)
    trainer = make_trainer(max_epochs=3)
    trainer.fit(model, data)
    sensitivity = crammer_singer_sensitivity(len(y), lam)
    sigma = analytic_gaussian_sigma(1e6, 1e-5, sensitivity)
    metrics = trainer.callback_metrics
    assert metrics["dp/sigma"].item() == pytest.approx(sigma, rel=1e-6)
    assert metrics["dp/sensitivity"].item() == pytest.approx(sensitivity, rel=1e-6)
    assert metrics["dp/epsilon"].item() == pytest.approx(1e6) and metrics["dp/delta"].item() == pytest.approx(1e-5)
    exact = fit_crammer_singer(X, y, 10, lam)
    assert np.abs(model.W.detach().double().numpy() - exact).max() < 6 * sigma + 1e-5
    assert trainer.current_epoch == 1, "the release happens once, then training stops"
    assert trainer.test(model, data, verbose=False)[0]["test/acc"] > 0.9


def test_weight_perturbation_noise_has_the_analytic_sigma_and_is_released_once(tmp_path):
    data, lam, epsilon = digits(), 0.05, 0.5
    X, y = training_split(data)
    model = PMSVM("weight", num_features=64, num_classes=10, epsilon=epsilon, delta=1e-5, lam=lam, seed=1)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = make_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint])
    trainer.fit(model, data)
    sigma = analytic_gaussian_sigma(epsilon, 1e-5, crammer_singer_sensitivity(len(y), lam))
    released = model.W.detach().double().numpy().copy()
    noise = released - fit_crammer_singer(X, y, 10, lam)
    assert noise.size == 640
    assert noise.std() == pytest.approx(sigma, rel=0.1), f"empirical std {noise.std():.4f}, analytic sigma {sigma:.4f}"
    assert abs(noise.mean()) < 4 * sigma / math.sqrt(noise.size)
    # the checkpoint holds the released model, never the noiseless one
    state = torch.load(tmp_path / "last.ckpt", weights_only=False)["state_dict"]
    np.testing.assert_array_equal(state["linear.weight"].numpy(), model.W.detach().numpy())
    assert bool(state["released"])
    # fitting again (or resuming) does not solve or add noise a second time
    make_trainer(max_epochs=3).fit(model, data)
    np.testing.assert_array_equal(model.W.detach().double().numpy(), released)
    resumed = PMSVM("weight", num_features=64, num_classes=10, epsilon=epsilon, delta=1e-5, lam=lam, seed=2)
    make_trainer(max_epochs=3).fit(resumed, data, ckpt_path=str(tmp_path / "last.ckpt"))
    np.testing.assert_array_equal(resumed.W.detach().double().numpy(), released)


def test_the_seed_makes_the_release_reproducible():
    def release(seed):
        model = PMSVM("weight", num_features=4, num_classes=3, epsilon=1.0, lam=0.1, seed=seed)
        make_trainer().fit(model, TabularDataModule("iris", row_norm="clip"))
        return model.W.detach().clone()

    assert torch.equal(release(3), release(3))
    assert not torch.equal(release(3), release(4))


def test_one_vs_rest_baselines_split_the_budget():
    data, lam, epsilon = TabularDataModule("wine", row_norm="normalize"), 0.1, 1.5
    X, y = training_split(data)
    sensitivity = 2 / (len(y) * lam)
    sigmas = {}
    for mechanism, calibrate in (("ovr_classic", classic_gaussian_sigma), ("ovr_analytic", analytic_gaussian_sigma)):
        model = PMSVM(mechanism, num_features=13, num_classes=3, epsilon=epsilon, delta=1e-5, lam=lam, seed=0)
        trainer = make_trainer()
        trainer.fit(model, data)
        sigmas[mechanism] = trainer.callback_metrics["dp/sigma"].item()
        assert sigmas[mechanism] == pytest.approx(calibrate(epsilon / 3, 1e-5 / 3, sensitivity), rel=1e-6)
        assert trainer.callback_metrics["dp/sensitivity"].item() == pytest.approx(sensitivity, rel=1e-6)
    assert sigmas["ovr_analytic"] < sigmas["ovr_classic"]
    huge = PMSVM("ovr_analytic", num_features=13, num_classes=3, epsilon=1e7, lam=lam, seed=0)
    trainer = make_trainer()
    trainer.fit(huge, data)
    sigma = trainer.callback_metrics["dp/sigma"].item()
    assert sigma < 1e-4
    np.testing.assert_allclose(huge.W.detach().double().numpy(), fit_one_vs_rest(X, y, 3, lam), atol=6 * sigma + 1e-6)


def test_non_private_releases_the_exact_solution():
    data, lam = TabularDataModule("wine", row_norm="normalize"), 0.01
    X, y = training_split(data)
    model = PMSVM("non_private", num_features=13, num_classes=3, lam=lam)
    trainer = make_trainer()
    trainer.fit(model, data)
    np.testing.assert_allclose(model.W.detach().double().numpy(), fit_crammer_singer(X, y, 3, lam), atol=1e-6)
    assert trainer.callback_metrics["dp/sigma"].item() == 0.0
    assert trainer.test(model, data, verbose=False)[0]["test/acc"] > 0.9


def test_rows_outside_the_unit_ball_are_refused():
    model = PMSVM("weight", num_features=4, num_classes=3)
    with pytest.raises(ValueError, match=r'L2 norm .* > 1.*row_norm="clip".*row_norm="normalize"'):
        make_trainer().fit(model, TabularDataModule("iris", row_norm="none"))
    assert not bool(model.released)
    assert torch.count_nonzero(model.W) == 0


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="num_features"):
        make_trainer().fit(PMSVM("weight", num_features=5, num_classes=3), TabularDataModule("iris", row_norm="clip"))
    with pytest.raises(ValueError, match="num_classes"):
        make_trainer().fit(PMSVM("weight", num_features=4, num_classes=2), TabularDataModule("iris", row_norm="clip"))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("epsilon", 0.0, r"PMSVM: epsilon=0\.0 is invalid, expected a number > 0"),
        ("epsilon", -1.0, r"epsilon=-1\.0 is invalid, expected a number > 0"),
        ("delta", 0.0, r"delta=0\.0 is invalid, expected a number in \(0, 1\)"),
        ("delta", 1.0, r"delta=1\.0 is invalid, expected a number in \(0, 1\)"),
        ("lam", 0.0, r"lam=0\.0 is invalid, expected a number > 0"),
        ("lam", -0.5, r"lam=-0\.5 is invalid, expected a number > 0"),
        ("mu", -1.0, r"mu=-1\.0 is invalid, expected a number >= 0"),
        ("smoothing", 0.0, r"smoothing=0\.0 is invalid, expected a number > 0"),
        ("lam", math.inf, "lam=inf is invalid, expected a finite number"),
        ("mechanism", "laplace", "mechanism='laplace' is invalid, expected one of"),
        ("num_classes", 1, "num_classes=1 is invalid, expected an integer >= 2"),
    ],
)
def test_bad_hyperparameters_are_refused(key, value, message):
    with pytest.raises(ValueError, match=message):
        PMSVM(**{key: value})


def test_exact_mechanisms_refuse_the_dpsgd_callback():
    trainer = make_trainer(callbacks=[DPSGD(noise_multiplier=1.0)])
    with pytest.raises(ValueError, match="remove the DPSGD callback"):
        trainer.fit(PMSVM("weight", num_features=4, num_classes=3), TabularDataModule("iris", row_norm="clip"))


@pytest.mark.parametrize(("mechanism", "lr"), [("gradient", 0.5), ("adaptive_gradient", 0.05)])
def test_gradient_mechanisms_train_without_the_callback(mechanism, lr):
    data = TabularDataModule("wine", row_norm="normalize", batch_size=16)
    model = PMSVM(mechanism, num_features=13, num_classes=3, mu=1e-3, smoothing=0.5, lr=lr)
    assert model.automatic_optimization
    expected = torch.optim.Adam if mechanism == "adaptive_gradient" else torch.optim.SGD
    assert isinstance(model.configure_optimizers(), expected)
    trainer = make_trainer(max_epochs=8)
    with pytest.warns(UserWarning, match="NOT private"):
        trainer.fit(model, data)
    assert trainer.test(model, data, verbose=False)[0]["test/acc"] > 0.85
    # the regulariser is mu ||W||_F^2, and the training loss the mean smoothed hinge plus it
    W = model.W.detach()
    assert model.regularizer().item() == pytest.approx(1e-3 * (W**2).sum().item(), rel=1e-6)
    x, y, index = next(iter(data.train_dataloader()))
    losses = model.per_sample_losses((x, y, index))
    assert losses.shape == (len(y),)
    torch.testing.assert_close(losses, smoothed_crammer_singer_loss(x @ W.T, y, 0.5))


def test_gradient_mechanism_trains_privately_under_the_dpsgd_callback():
    data = TabularDataModule("wine", row_norm="normalize", batch_size=16)
    model = PMSVM("gradient", num_features=13, num_classes=3, lr=0.5, smoothing=0.5)
    trainer = make_trainer(max_epochs=2, callbacks=[DPSGD(noise_multiplier=1.0, max_grad_norm=1.0)])
    trainer.fit(model, data)  # DPSGD stops the run if a parameter gets no per-sample gradient
    assert trainer.callback_metrics["dp/epsilon"].item() > 0
    assert trainer.global_step > 0 and torch.count_nonzero(model.W) > 0
