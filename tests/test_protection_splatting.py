"""The torch Gaussian-splatting renderer: closed forms, a brute-force per-pixel compositor, finite differences."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from trustlit.protection.splatting import Camera, Gaussians, camera_ring, footprint_pairs, look_at, project, render


def random_gaussians(count: int, seed: int, dtype: torch.dtype = torch.float64) -> Gaussians:
    generator = torch.Generator().manual_seed(seed)
    return Gaussians(
        means=0.4 * torch.randn(count, 3, generator=generator, dtype=dtype),
        log_scales=-1.6 + 0.3 * torch.randn(count, 3, generator=generator, dtype=dtype),
        quaternions=torch.randn(count, 4, generator=generator, dtype=dtype),
        colours=torch.rand(count, 3, generator=generator, dtype=dtype),
        opacity_logits=torch.randn(count, generator=generator, dtype=dtype).clamp(-2, 2),
    )


def front_camera(dtype: torch.dtype = torch.float64) -> Camera:
    return look_at(torch.tensor([0.0, -3.0, 0.5], dtype=dtype), torch.zeros(3, dtype=dtype), fov_x=0.8)


def brute_force(gaussians: Gaussians, camera: Camera, size: int, background: torch.Tensor) -> torch.Tensor:
    """Per pixel and per Gaussian, with the projection's Jacobian by autograd instead of the closed form."""
    fx, fy, cx, cy = camera.intrinsics(size, size)
    rotation, translation = camera.world_to_camera[:3, :3], camera.world_to_camera[:3, 3]

    def to_screen(point: torch.Tensor) -> torch.Tensor:
        p = rotation @ point + translation
        return torch.stack([fx * p[0] / p[2] + cx, fy * p[1] / p[2] + cy])

    entries = []
    for i in range(len(gaussians)):
        mean = gaussians.means[i]
        depth = float((rotation @ mean + translation)[2])
        q = gaussians.quaternions[i] / gaussians.quaternions[i].norm()
        w, x, y, z = q.tolist()
        r = torch.tensor(
            [
                [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
            ],
            dtype=mean.dtype,
        )
        sigma = r @ torch.diag(torch.exp(2 * gaussians.log_scales[i])) @ r.T
        jac = torch.autograd.functional.jacobian(to_screen, mean)  # d(screen)/d(world) = J W
        cov2 = jac @ sigma @ jac.T + 0.3 * torch.eye(2, dtype=mean.dtype)
        entries.append((depth, to_screen(mean), torch.linalg.inv(cov2), i))
    entries.sort(key=lambda entry: entry[0])
    image = torch.zeros(3, size, size, dtype=gaussians.means.dtype)
    for row in range(size):
        for col in range(size):
            pixel = torch.tensor([col + 0.5, row + 0.5], dtype=gaussians.means.dtype)
            colour, transmittance = torch.zeros(3, dtype=pixel.dtype), 1.0
            for _, centre, conic, i in entries:
                d = pixel - centre
                alpha = min(0.99, float(torch.sigmoid(gaussians.opacity_logits[i]) * torch.exp(-0.5 * d @ conic @ d)))
                if alpha < 1 / 255:
                    continue
                colour = colour + transmittance * alpha * gaussians.colours[i]
                transmittance *= 1 - alpha
            image[:, row, col] = colour + transmittance * background
    return image


def test_single_gaussian_matches_the_closed_form():
    """An isotropic Gaussian on the optical axis at depth 3: alpha = o at the centre pixel and
    o * exp(-1/(2 s'^2)) one pixel away, with s'^2 = (f s / z)^2 + 0.3; the background fills the rest."""
    camera = look_at(torch.tensor([0.0, -3.0, 0.0]), torch.zeros(3), fov_x=1.0)
    scale, opacity = 0.05, 0.8
    gaussians = Gaussians(
        torch.zeros(1, 3),
        torch.full((1, 3), math.log(scale)),
        torch.tensor([[1.0, 0.0, 0.0, 0.0]]),
        torch.tensor([[1.0, 0.5, 0.0]]),
        torch.tensor([math.log(opacity / (1 - opacity))]),
    )
    background = torch.tensor([0.0, 0.0, 1.0])
    image = render(gaussians, camera, 9, background=background)
    focal = camera.intrinsics(9, 9)[0]
    variance = (focal * scale / 3.0) ** 2 + 0.3
    alpha_next = opacity * math.exp(-0.5 / variance)
    assert image[:, 4, 4] == pytest.approx([opacity, 0.5 * opacity, 1 - opacity], abs=1e-5)
    assert image[:, 4, 5] == pytest.approx([alpha_next, 0.5 * alpha_next, 1 - alpha_next], abs=1e-5)
    assert image[:, 0, 0] == pytest.approx([0.0, 0.0, 1.0], abs=1e-6)


@pytest.mark.parametrize("method", ["culled", "dense"])
def test_renderer_matches_a_brute_force_compositor(method):
    gaussians = random_gaussians(6, seed=1)
    camera = front_camera()
    background = torch.tensor([0.2, 0.1, 0.3], dtype=torch.float64)
    expected = brute_force(gaussians, camera, 8, background)
    assert torch.allclose(render(gaussians, camera, 8, background=background, method=method), expected, atol=1e-9)
    assert expected.std() > 0.05  # the Gaussians really cover the image


def test_gradients_match_finite_differences():
    """gradcheck of every attribute (float64, the smooth variant alpha_min = 0; depths far apart so the
    compositing order does not change under the probe)."""
    base = random_gaussians(3, seed=2)
    base.means[:, 1] = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64)
    camera = front_camera()

    def image(*tensors: torch.Tensor) -> torch.Tensor:
        return render(Gaussians(*tensors), camera, 6, alpha_min=0.0, method="dense")

    inputs = tuple(t.clone().requires_grad_(True) for t in base.tensors().values())
    assert torch.autograd.gradcheck(image, inputs, eps=1e-6, atol=1e-5)


def test_culled_gradients_match_finite_differences():
    """gradcheck of the culled path at the released cut 1/255 (float64; no pixel's alpha lies within the probe's
    reach of the cut, so the image is smooth there; depths far apart as above)."""
    base = random_gaussians(3, seed=2)
    base.means[:, 1] = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64)
    camera = front_camera()

    def image(*tensors: torch.Tensor) -> torch.Tensor:
        return render(Gaussians(*tensors), camera, 6, background=torch.full((3,), 0.3, dtype=torch.float64))

    inputs = tuple(t.clone().requires_grad_(True) for t in base.tensors().values())
    assert torch.autograd.gradcheck(image, inputs, eps=1e-6, atol=1e-5)


def anisotropic_scene(count: int, seed: int) -> Gaussians:
    """Random Gaussians with scales spread over a factor ~20 per axis and opacities from 0.002 to 0.999, some
    partly outside the frame: the footprints are thin, wide, tiny and clipped."""
    gaussians = random_gaussians(count, seed)
    generator = torch.Generator().manual_seed(seed + 100)
    gaussians.means[:] = 0.8 * torch.randn(count, 3, generator=generator, dtype=torch.float64)
    gaussians.log_scales[:] = -2.5 + 1.0 * torch.randn(count, 3, generator=generator, dtype=torch.float64)
    gaussians.opacity_logits[:] = torch.empty(count, dtype=torch.float64).uniform_(-6, 7, generator=generator)
    return gaussians


@pytest.mark.parametrize(("seed", "size"), [(11, 16), (12, (12, 20)), (13, 9)])
def test_culled_agrees_with_dense(seed, size):
    """Footprint culling changes no pixel: culled and dense images (and gradients) agree on random scenes."""
    gaussians, camera = anisotropic_scene(60, seed), front_camera()
    background = torch.tensor([0.3, 0.6, 0.1], dtype=torch.float64)
    images = {}
    for method in ("culled", "dense"):
        tensors = gaussians.detach()
        for value in tensors.tensors().values():
            value.requires_grad_(True)
        image = render(tensors, camera, size, background=background, method=method)
        (image * torch.linspace(0, 1, image.numel(), dtype=image.dtype).reshape(image.shape)).sum().backward()
        images[method] = (image, [value.grad for value in tensors.tensors().values()])
    (culled, culled_grads), (dense, dense_grads) = images["culled"], images["dense"]
    assert torch.allclose(culled, dense, atol=1e-10) and dense.std() > 0.05
    for a, b in zip(culled_grads, dense_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-8)


def test_footprints_hold_every_visible_pair_and_few_others():
    """Every (Gaussian, pixel) with alpha >= 1/255 is a pair (the box holds the cut ellipse), each at most once,
    in front-to-back order within a pixel; the boxes hold under half of all M x H x W pairs."""
    gaussians, camera, size = anisotropic_scene(80, seed=14), front_camera(), 24
    projected = project(gaussians, camera, size, size)
    order = torch.argsort(projected["depths"])
    sorted_projection = {key: projected[key][order] for key in ("means2d", "conics", "screen")}
    sorted_projection["opacities"] = gaussians.opacities[projected["kept"][order]]
    gaussian, pixel = footprint_pairs(sorted_projection, size, size, 1 / 255)
    rows, columns = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    d = torch.stack([columns, rows], -1).reshape(1, -1, 2) - sorted_projection["means2d"][:, None]
    quadratic = torch.einsum("mpi,mij,mpj->mp", d, sorted_projection["conics"], d)
    visible = sorted_projection["opacities"][:, None] * torch.exp(-0.5 * quadratic) >= 1 / 255
    pairs = torch.zeros_like(visible, dtype=torch.long).index_put_((gaussian, pixel), torch.tensor(1), accumulate=True)
    assert pairs.max() == 1 and not (visible & (pairs == 0)).any() and visible.sum() > 100
    assert len(pixel) < 0.5 * visible.numel()
    same_pixel = pixel[1:] == pixel[:-1]
    assert (pixel[1:] >= pixel[:-1]).all() and (gaussian[1:][same_pixel] > gaussian[:-1][same_pixel]).all()


def test_depth_order_decides_occlusion():
    """Two opaque Gaussians on the axis: the nearer one's colour is seen whichever comes first in storage."""
    camera = look_at(torch.tensor([0.0, -3.0, 0.0]), torch.zeros(3), fov_x=1.0)
    near_red = Gaussians(
        torch.tensor([[0.0, -1.0, 0.0], [0.0, 1.0, 0.0]]),
        torch.full((2, 3), -1.0),
        torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]),
        torch.tensor([[1.0, 0, 0], [0, 0, 1.0]]),
        torch.full((2,), 8.0),
    )
    swapped = near_red.select(torch.tensor([1, 0]))
    for scene in (near_red, swapped):
        assert render(scene, camera, 5)[:, 2, 2] == pytest.approx([0.99, 0, 0.0099], abs=1e-4)


def test_behind_the_camera_renders_the_background():
    camera = look_at(torch.tensor([0.0, -3.0, 0.0]), torch.zeros(3), fov_x=1.0)
    behind = random_gaussians(2, seed=3, dtype=torch.float32)
    behind.means[:] = torch.tensor([0.0, -5.0, 0.0])
    assert torch.equal(render(behind, camera, 4, background=torch.ones(3)), torch.ones(3, 4, 4))
    beside = behind.detach()
    beside.means[:] = torch.tensor([20.0, 3.0, 0.0])  # in front of the camera, far outside the frame: no pairs
    beside.log_scales[:] = -3.0
    for method in ("culled", "dense"):
        assert torch.equal(render(beside, camera, 4, background=torch.ones(3), method=method), torch.ones(3, 4, 4))


def test_camera_ring_looks_at_the_target():
    cameras = camera_ring(6, radius=4.0, height=1.0)
    for camera in cameras:
        assert camera.position[:2].norm() == pytest.approx(4.0, abs=1e-5)
        assert camera.position[2] == pytest.approx(1.0, abs=1e-5)
        centre = camera.world_to_camera[:3, 3]  # the world origin in camera coordinates
        assert centre[:2] == pytest.approx([0.0, 0.0], abs=1e-5) and centre[2] > 0


def test_scene_file_round_trip_and_missing_attributes(tmp_path):
    gaussians = random_gaussians(4, seed=4, dtype=torch.float32)
    loaded = Gaussians.load(gaussians.save(tmp_path / "scene.pt"))
    assert all(torch.equal(a, b) for a, b in zip(gaussians.tensors().values(), loaded.tensors().values(), strict=True))
    partial = {k: v for k, v in gaussians.tensors().items() if k not in ("colours", "quaternions")}
    torch.save(partial, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match=r"lacks Gaussian attributes \['quaternions', 'colours'\]"):
        Gaussians.load(tmp_path / "partial.pt")
    with pytest.raises(FileNotFoundError, match=r"absent\.pt'?: no such file"):
        Gaussians.load(tmp_path / "absent.pt")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colours": torch.zeros(4, 4)}, r"colours has shape \[4, 4\], expected \[N, 3\]"),
        ({"opacity_logits": torch.zeros(3)}, r"opacity_logits has shape \[3\], expected \[N\] with N=4"),
        ({"means": torch.full((4, 3), float("nan"))}, "means has non-finite values"),
        ({"log_scales": torch.zeros(4, 3, dtype=torch.int64)}, "log_scales must be a floating-point tensor"),
    ],
)
def test_bad_gaussians_are_refused(change, message):
    tensors = {**random_gaussians(4, seed=5, dtype=torch.float32).tensors(), **change}
    with pytest.raises(ValueError, match=message):
        Gaussians(**tensors)


def test_bad_render_arguments_are_refused():
    gaussians, camera = random_gaussians(2, seed=6, dtype=torch.float32), front_camera(torch.float32)
    with pytest.raises(ValueError, match="image_size=0 is invalid"):
        render(gaussians, camera, 0)
    with pytest.raises(ValueError, match="backend='cuda' is invalid"):
        render(gaussians, camera, 4, backend="cuda")
    with pytest.raises(ValueError, match=r"method='tiles' is invalid, expected one of \['culled', 'dense'\]"):
        render(gaussians, camera, 4, method="tiles")
    with pytest.raises(ValueError, match=r"alpha_min=0\.0 is invalid for method='culled', expected 0 < alpha_min"):
        render(gaussians, camera, 4, alpha_min=0.0)
    with pytest.raises(ValueError, match=r"alpha_min=1\.5 is invalid for method='dense'"):
        render(gaussians, camera, 4, alpha_min=1.5, method="dense")
    with pytest.raises(ValueError, match=r"fov_x=4\.0 is invalid"):
        Camera(torch.eye(4), 4.0)


if importlib.util.find_spec("gsplat") is None:

    def test_gsplat_backend_without_gsplat_says_so():
        with pytest.raises(ValueError, match="needs the gsplat package"):
            render(random_gaussians(2, 7, torch.float32), front_camera(torch.float32), 4, backend="gsplat")

else:  # pragma: no cover - needs CUDA and gsplat

    def test_gsplat_agrees_with_the_torch_renderer():
        gaussians = Gaussians(**{k: v.cuda() for k, v in random_gaussians(32, 8, torch.float32).tensors().items()})
        camera = front_camera(torch.float32)
        reference = render(gaussians, camera, 16)
        assert torch.allclose(render(gaussians, camera, 16, backend="gsplat"), reference, atol=2e-2)
