"""BridgePure (trustlit/attacks/purification.py): the VE bridge's marginal, the released preconditioning and loss
weight in closed form, the Karras times, the hybrid Heun sampler with an exact denoiser, pre-noise, the modules
end to end; the training-free baselines (trustlit/attacks/purification_baselines.py); bad input."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import quiet_trainer

from trustlit.attacks.purification import (
    BridgePure,
    SupervisedDenoiser,
    bridge_marginal,
    bridge_sample,
    bridge_scalings,
    bridge_weighting,
    karras_times,
    noise_conditioning,
    ode_drift,
    pre_noise,
    sample_bridge,
)
from trustlit.attacks.purification_baselines import (
    GaussianBlur,
    GrayscaleJPEG,
    JPEGCompression,
    MedianFilter,
    gaussian_kernel,
)
from trustlit.data.leaked_pairs import LeakedPairs, LeakedPairsDataModule, resized

TINY_UNET = {"image_size": 8, "block_out_channels": [8, 16], "dropout": 0.0}


def smooth_images(count: int, channels: int = 1, size: int = 8, seed: int = 0) -> torch.Tensor:
    """Images in [0, 1]: random 2 x 2 grids upsampled bilinearly (smooth, so JPEG and filters act mildly)."""
    grid = torch.rand(count, channels, 2, 2, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.interpolate(grid, size=size, mode="bilinear", align_corners=False)


# --- the bridge --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0.5, 20.0, 60.0])
def test_forward_marginal_matches_its_formula_by_monte_carlo(t):
    """200,000 draws of x_t at one pixel pair: the sample mean lies within 5 standard errors of
    a_t x_T + (1 - a_t) x_0 (a miss has probability < 1e-6 per check) and the sample std within 1 % of
    t sqrt(1 - a_t) (its relative standard error is 1 / sqrt(2n) = 0.16 %)."""
    n, x0, xT = 200_000, torch.full((1,), -0.4), torch.full((1,), 0.7)
    noise = torch.randn(n, 1, 1, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    samples = bridge_sample(x0.double().expand(n, 1, 1, 1), xT.double().expand(n, 1, 1, 1),
                            torch.full((n,), t, dtype=torch.float64), noise)  # fmt: skip
    a = t**2 / 80.0**2
    mean, std = a * 0.7 + (1 - a) * -0.4, t * math.sqrt(1 - a)
    assert abs(float(samples.mean()) - mean) < 5 * std / math.sqrt(n)
    assert abs(float(samples.std()) / std - 1) < 0.01


def test_forward_marginal_ends_are_the_two_images():
    x0, xT = smooth_images(3), smooth_images(3, seed=1)
    mean, std = bridge_marginal(x0, xT, torch.zeros(3))
    assert torch.equal(mean, x0) and float(std.abs().max()) == 0
    mean, std = bridge_marginal(x0, xT, torch.full((3,), 80.0))
    assert torch.allclose(mean, xT) and float(std.abs().max()) == 0
    near = bridge_sample(x0, xT, torch.full((3,), 1e-6), torch.randn_like(x0))
    assert torch.allclose(near, x0, atol=1e-5)


def test_preconditioning_closed_forms_at_hand_picked_times():
    # t = T (a = 1): A = sigma^2 = 0.25, B = sigma^4; c_in = 2, c_skip = 0, c_out = 0.5, lambda = 4
    c_skip, c_out, c_in = bridge_scalings(torch.tensor([80.0], dtype=torch.float64))
    assert torch.allclose(torch.cat([c_skip, c_out, c_in]), torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64))
    # t = 40 (a = 1/4): A = 0.25/16 + 0.25*9/16 + 1600*3/4 = 1200.15625, B = 0.0625/16 + 0.25*1600*3/4 = 300.00390625
    t = torch.tensor([40.0], dtype=torch.float64)
    big_a, big_b = 1200.15625, 300.00390625
    c_skip, c_out, c_in = bridge_scalings(t)
    assert math.isclose(float(c_skip), 0.75 * 0.25 / big_a, rel_tol=1e-12)
    assert math.isclose(float(c_out), math.sqrt(big_b / big_a), rel_tol=1e-12)
    assert math.isclose(float(c_in), 1 / math.sqrt(big_a), rel_tol=1e-12)
    assert math.isclose(float(bridge_weighting(t)), big_a / big_b, rel_tol=1e-12)
    # t -> 0: EDM's scalings sigma_d^2 / (sigma_d^2 + t^2), sigma_d t / sqrt(sigma_d^2 + t^2), 1 / sqrt(...)
    t = torch.tensor([0.01], dtype=torch.float64)
    c_skip, c_out, c_in = bridge_scalings(t)
    edm = (0.25 / (0.25 + 1e-4), 0.5 * 0.01 / math.sqrt(0.25 + 1e-4), 1 / math.sqrt(0.25 + 1e-4))
    for value, expected in zip((c_skip, c_out, c_in), edm, strict=True):
        assert math.isclose(float(value), expected, rel_tol=1e-6)
    # cov_xy = sigma^2 / 2 gives c_skip = 1/2 at sigma_max (the released comment)
    c_skip, _, _ = bridge_scalings(torch.tensor([80.0], dtype=torch.float64), cov_xy=0.125)
    assert math.isclose(float(c_skip), 0.5, rel_tol=1e-12)


def test_weighting_is_one_over_c_out_squared_and_noise_conditioning_is_250_log_t():
    t = torch.linspace(0.002, 79.9, 50, dtype=torch.float64)
    _, c_out, _ = bridge_scalings(t)
    assert torch.allclose(bridge_weighting(t), c_out.pow(-2))
    assert torch.allclose(noise_conditioning(torch.tensor([1.0, math.e])), torch.tensor([0.0, 250.0]))


def test_karras_times_run_from_sigma_max_to_sigma_min_then_zero():
    times = karras_times(40)
    assert times.shape == (41,) and float(times[-1]) == 0
    assert math.isclose(float(times[0]), 80.0 - 1e-4, rel_tol=1e-12) and math.isclose(float(times[-2]), 0.002)
    assert bool((times[:-1] > times[1:]).all())
    # rho = 1 spaces them evenly
    assert torch.allclose(karras_times(5, 1.0, 5.0 + 1e-4, rho=1.0)[:-1], torch.tensor([5.0, 4, 3, 2, 1]).double())


@pytest.mark.parametrize(("churn", "guidance"), [(0.0, 1.0), (0.0, 0.5), (0.33, 0.5), (0.8, 0.5)])
def test_sampling_with_the_exact_denoiser_maps_x_T_to_x_0(churn, guidance):
    x0, xT = 2 * smooth_images(4) - 1, 2 * smooth_images(4, seed=3) - 1

    def oracle(x_t, t, end):
        return x0

    generator = torch.Generator().manual_seed(0)
    out = sample_bridge(oracle, xT, steps=40, churn_step_ratio=churn, guidance=guidance, generator=generator)
    assert float((out - x0).abs().max()) < 1e-3


def test_ode_drift_with_unit_guidance_moves_along_the_bridge_mean():
    """On x = a_t x_T + (1 - a_t) x_0 with D = x_0 and w = 1, dx/dt is d/dt of that mean: 2 t (x_T - x_0) / T^2."""
    x0, xT = 2 * smooth_images(2).double() - 1, 2 * smooth_images(2, seed=3).double() - 1
    for t in (0.01, 3.0, 40.0, 79.0):
        mean, _ = bridge_marginal(x0, xT, torch.full((2,), t, dtype=torch.float64))
        assert torch.allclose(ode_drift(mean, t, x0, xT, 80.0, 1.0), 2 * t * (xT - x0) / 80.0**2)


def test_clean_images_pass_through_the_identity_bridge_unchanged():
    """The stated property: on clean inputs (x_T = x_0, the identity protection) the exact denoiser is D = x_T, and the
    sampler returns x_T, with or without churn."""
    clean = 2 * smooth_images(4) - 1
    for churn in (0.0, 0.33):
        out = sample_bridge(lambda x_t, t, end: end, clean, churn_step_ratio=churn, generator=torch.Generator())
        assert float((out - clean).abs().max()) < 1e-3


def test_pre_noise_is_identity_at_zero_and_has_the_stated_moments():
    x = 2 * smooth_images(2) - 1
    assert pre_noise(x, 0.0) is x
    n, beta = 100_000, 0.02
    draws = pre_noise(torch.full((n,), 0.3, dtype=torch.float64), beta, torch.Generator().manual_seed(0))
    assert abs(float(draws.mean()) - math.sqrt(1 - beta) * 0.3) < 5 * math.sqrt(beta / n)
    assert abs(float(draws.var()) / beta - 1) < 0.02  # relative sd of a variance estimate: sqrt(2 / n) = 0.45 %
    assert float(pre_noise(torch.ones(1000), 0.5).max()) <= 1


# --- the modules ---------------------------------------------------------------------------------------------------


def pairs_loader(clean: torch.Tensor, protected: torch.Tensor, batch_size: int = 8):
    rows = [{"clean": c, "protected": p} for c, p in zip(clean, protected, strict=True)]
    return torch.utils.data.DataLoader(rows, batch_size=batch_size)


@pytest.mark.slow  # about 4 s alone, 11 s on the loaded 2-core machine
def test_bridgepure_fits_under_a_trainer_and_purifies_reproducibly():
    clean = smooth_images(8)
    protected = (clean + 0.2 * (torch.arange(64).reshape(1, 1, 8, 8) % 2)).clamp(0, 1)
    model = BridgePure(**TINY_UNET, steps=3, churn_step_ratio=0.33, beta=0.02, ema_decay=0.9)
    before = [p.detach().clone() for p in model.ema.parameters()]
    quiet_trainer(max_steps=2).fit(model, pairs_loader(clean, protected))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.ema.parameters(), strict=True))
    first, second = model.purify(protected), model.purify(protected)
    assert first.shape == protected.shape and torch.equal(first, second)
    assert float(first.min()) >= 0 and float(first.max()) <= 1


def test_supervised_denoiser_trained_on_clean_pairs_leaves_clean_images_nearly_unchanged():
    torch.manual_seed(0)
    clean = smooth_images(16)
    model = SupervisedDenoiser(**TINY_UNET, lr=5e-3, ema_decay=0.0)
    untrained = float((model.purify(clean) - clean).abs().mean())
    quiet_trainer(max_steps=25).fit(model, pairs_loader(clean, clean, batch_size=16))
    trained = float((model.purify(clean) - clean).abs().mean())
    assert trained < 0.02 and trained < untrained / 3


# --- baselines -----------------------------------------------------------------------------------------------------


def test_jpeg_quality_100_is_near_identity_and_quality_5_is_not():
    for channels in (1, 3):
        images = smooth_images(4, channels=channels, size=16)
        near = (JPEGCompression(100).purify(images) - images).abs()
        assert float(near.mean()) < 0.01 and float(near.max()) < 0.05
        noisy = (images + 0.1 * torch.randn_like(images)).clamp(0, 1)
        assert float((JPEGCompression(5).purify(noisy) - noisy).abs().mean()) > 5 * float(near.mean())


def test_median_filter_removes_a_single_salt_pixel_and_keeps_constants():
    image = torch.full((1, 1, 9, 9), 0.2)
    image[0, 0, 4, 4] = 1.0
    assert torch.allclose(MedianFilter(3).purify(image), torch.full_like(image, 0.2))


def test_gaussian_blur_keeps_constants_and_spreads_a_point_by_its_kernel():
    assert torch.allclose(GaussianBlur(3, 1.0).purify(torch.full((2, 3, 8, 8), 0.4)), torch.full((2, 3, 8, 8), 0.4))
    point = torch.zeros(1, 1, 9, 9)
    point[0, 0, 4, 4] = 1.0
    kernel = gaussian_kernel(3, 1.0).float()
    assert torch.allclose(GaussianBlur(3, 1.0).purify(point)[0, 0, 3:6, 3:6], torch.outer(kernel, kernel))
    assert math.isclose(float(kernel[1] / kernel[0]), math.exp(0.5), rel_tol=1e-6)


def test_grayscale_jpeg_gives_equal_channels_with_the_luma_of_the_image():
    images = smooth_images(2, channels=3, size=16)
    out = GrayscaleJPEG(100).purify(images)
    assert torch.allclose(out[:, 0], out[:, 1], atol=2 / 255) and torch.allclose(out[:, 0], out[:, 2], atol=2 / 255)
    luma = 0.299 * images[:, 0] + 0.587 * images[:, 1] + 0.114 * images[:, 2]
    assert float((out[:, 0] - luma).abs().mean()) < 0.01


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (torch.rand(2, 8, 8), r"images to purify: expected a float tensor \[N, C, H, W\].*shape \[2, 8, 8\]"),
        (torch.rand(2, 1, 8, 8) * 2, r"images to purify: expected values in \[0, 1\], got range"),
        ((torch.rand(2, 1, 8, 8) * 255).to(torch.uint8), "dtype torch.uint8"),
        (torch.rand(2, 3, 8, 8), "images to purify have 3 channels, expected 1"),
    ],
)
def test_bad_images_are_refused_in_one_line(images, message):
    with pytest.raises(ValueError, match=message):
        SupervisedDenoiser(**TINY_UNET).purify(images)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: BridgePure(**TINY_UNET, beta=1.0), r"BridgePure: beta=1.0 is invalid, expected a number in \[0, 1\)"),
        (lambda: BridgePure(**TINY_UNET, churn_step_ratio=1.0), "churn_step_ratio=1.0 is invalid"),
        (lambda: BridgePure(**TINY_UNET, steps=1), "steps=1 is invalid"),
        (
            lambda: BridgePure(image_size=10, block_out_channels=[8, 16, 32]),
            "image_size=10 is invalid .* multiple of 4",
        ),
        (lambda: BridgePure(**TINY_UNET, lr=0.0), "BridgePure: lr=0.0 is invalid, expected a number > 0"),
        (lambda: JPEGCompression(0), r"JPEGCompression: quality=0 is invalid, expected an integer in \[1, 100\]"),
        (lambda: MedianFilter(2), "MedianFilter: kernel_size=2 is invalid, expected an odd integer"),
        (lambda: GaussianBlur(3, 0.0), "GaussianBlur: sigma=0.0 is invalid"),
        (lambda: pre_noise(torch.zeros(1), -0.1), r"beta=-0.1 is invalid"),
    ],
)
def test_bad_hyperparameters_are_refused_in_one_line(build, message):
    with pytest.raises(ValueError, match=message):
        build()


# --- leaked pairs ----------------------------------------------------------------------------------------------------


def test_leaked_pairs_are_a_seeded_disjoint_fraction_of_the_protected_release():
    data = LeakedPairsDataModule(num_train=200, num_test=40, protection={"name": "random_noise"}, leaked_fraction=0.05,
                                 eval_pairs=16, batch_size=4)  # fmt: skip
    data.setup("fit")
    release = data.release
    assert len(data.leaked) == 10 and len(release.labels) == 190 and len(release.test_labels) == 40
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"clean", "protected"} and batch["clean"].shape == (4, 1, 8, 8)
    # the protection changed the images, and no leaked clean image is in the release to purify
    assert float((data.leaked.protected - data.leaked.clean).abs().max()) > 0
    assert not (data.leaked.clean.flatten(1)[:, None] == release.clean.flatten(1)[None]).all(-1).any()
    assert len(next(iter(data.test_dataloader()))["clean"]) == 4 and len(data.eval_set()) == 16
    again = LeakedPairsDataModule(num_train=200, num_test=40, protection={"name": "random_noise"}, leaked_fraction=0.05)
    again.setup("fit")
    assert torch.equal(again.leaked.protected, data.leaked.protected)


def test_unpaired_or_mismatched_leakage_is_refused():
    clean = smooth_images(4)
    with pytest.raises(ValueError, match="unpaired: 4 clean images but 3 protected ones"):
        LeakedPairs(clean, clean[:3])
    with pytest.raises(ValueError, match=r"mismatched: clean images \[1, 8, 8\] but protected \[1, 16, 16\]"):
        LeakedPairs(clean, smooth_images(4, size=16))
    with pytest.raises(ValueError, match="leaked protected images: expected values in"):
        LeakedPairs(clean, clean + 1)
    with pytest.raises(ValueError, match=r"leaked_fraction=1.0 is invalid, expected a number in \(0, 1\)"):
        LeakedPairsDataModule(leaked_fraction=1.0)
    with pytest.raises(ValueError, match="protection name='nope' is unknown"):
        LeakedPairsDataModule(num_train=20, num_test=4, protection={"name": "nope"}).setup("fit")


def test_resize_shrinks_the_release_by_area_averaging():
    data = LeakedPairsDataModule(num_train=20, num_test=4, protection={"name": "random_noise"}, resize=4)
    data.setup("fit")
    assert data.leaked.clean.shape[1:] == (1, 4, 4) and data.release.test_images.shape[1:] == (1, 4, 4)
    block = torch.arange(64.0).reshape(1, 1, 8, 8) / 64
    assert torch.allclose(resized(block, 4)[0, 0, 0, 0], block[0, 0, :2, :2].mean())
