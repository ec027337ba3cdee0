"""A differentiable 3D Gaussian-splatting renderer in pure torch (the reference), with an optional gsplat path.

3D Gaussian Splatting (Kerbl, Kopanas, Leimkühler, Drettakis, SIGGRAPH 2023). A scene is N Gaussians with mean
μ_i, covariance Σ_i = R_i S_i S_iᵀ R_iᵀ (R_i from the unit quaternion q_i, S_i = diag(exp(log_scales_i))), colour
c_i (the degree-0 spherical-harmonic term, stored directly as RGB) and opacity o_i = sigmoid(opacity_logit_i).
For a camera with world-to-camera rotation W and translation t, a Gaussian's camera-space mean is p = W μ + t and its
screen covariance follows the EWA local-affine approximation:

    Σ'_i = J_i W Σ_i Wᵀ J_iᵀ + ε I,   J_i = [[f_x/z, 0, -f_x x/z²], [0, f_y/z, -f_y y/z²]]

(ε = 0.3 px², the low-pass dilation of the released rasterizer). At pixel centre u, with d = u - π(p_i),

    α_i(u) = min(0.99, o_i exp(-½ dᵀ Σ'_i⁻¹ d))   (set to 0 below 1/255, as released)
    C(u) = Σ_i c_i α_i Π_{j<i} (1 - α_j) + Π_j (1 - α_j) · background,

the Gaussians taken front to back by camera depth z. The default compositor culls as the released rasterizer
does: each Gaussian touches only the pixels of its footprint, the bounding box of the ellipse where
o_i exp(-½ q) >= 1/255, so it changes no pixel; on the packed (Gaussian, pixel) pairs sorted by (pixel, depth),

    T_i(u) = exp(Σ_{j<i, j covers u} log(1 - α_j(u)))   (a segmented exclusive cumulative sum)

and the colours are scatter-added; time and memory O(pairs). ``method="dense"`` composites every Gaussian at
every pixel ([N, H·W], a cumulative product over depth): the reference. Both are tile-free with no early stop
once transmittance is spent, and differentiable by autograd through the sort's permutation.

Notes: docs/methods/gaussian_splatting.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from trustlit.paths import atomic_path, existing_file

DILATION = 0.3  # px², the screen-space low-pass filter of the released rasterizer
ALPHA_MIN = 1.0 / 255.0
ALPHA_MAX = 0.99
NEAR = 0.2  # the released frustum cull: Gaussians nearer than this are skipped
ATTRIBUTES = ("means", "log_scales", "quaternions", "colours", "opacity_logits")
TRAILING = {"means": (3,), "log_scales": (3,), "quaternions": (4,), "colours": (3,), "opacity_logits": ()}


@dataclass
class Gaussians:
    """N 3D Gaussians: means [N, 3], log_scales [N, 3], quaternions [N, 4] (w, x, y, z; normalised when used),
    colours [N, 3] (RGB, the SH degree-0 colour) and opacity_logits [N]. Shapes and finiteness are checked."""

    means: torch.Tensor
    log_scales: torch.Tensor
    quaternions: torch.Tensor
    colours: torch.Tensor
    opacity_logits: torch.Tensor

    def __post_init__(self) -> None:
        count = None
        for name in ATTRIBUTES:
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise ValueError(f"Gaussians: {name} must be a floating-point tensor, got {type(value).__name__}")
            if count is None:
                count = value.shape[0] if value.ndim > 0 else -1
            if value.ndim != 1 + len(TRAILING[name]) or tuple(value.shape) != (count, *TRAILING[name]):
                expected = "[" + ", ".join(["N", *map(str, TRAILING[name])]) + "]"
                raise ValueError(f"Gaussians: {name} has shape {list(value.shape)}, expected {expected} with N={count}")
            if not torch.isfinite(value).all():
                raise ValueError(f"Gaussians: {name} has non-finite values")

    def __len__(self) -> int:
        return self.means.shape[0]

    @property
    def opacities(self) -> torch.Tensor:
        return torch.sigmoid(self.opacity_logits)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in ATTRIBUTES}

    def detach(self) -> Gaussians:
        """A copy that shares no autograd graph or storage with this one."""
        return Gaussians(**{name: value.detach().clone() for name, value in self.tensors().items()})

    def select(self, keep: torch.Tensor) -> Gaussians:
        """The Gaussians where the boolean mask (or index tensor) ``keep`` selects."""
        return Gaussians(**{name: value[keep] for name, value in self.tensors().items()})

    @staticmethod
    def concat(parts: list[Gaussians]) -> Gaussians:
        return Gaussians(**{name: torch.cat([getattr(p, name) for p in parts]) for name in ATTRIBUTES})

    def save(self, path: str | Path) -> Path:
        """Write the attributes to ``path`` (a ``torch.save`` dict) atomically."""
        path = Path(path)
        with atomic_path(path) as temporary:
            torch.save({name: value.detach().cpu() for name, value in self.tensors().items()}, temporary)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Gaussians:
        """Read a scene file written by :meth:`save`; missing attributes raise one ValueError naming them."""
        stored = torch.load(existing_file(path, "path"), map_location="cpu", weights_only=True)
        if not isinstance(stored, dict):
            raise ValueError(f"{path}: a Gaussian scene file holds a dict of tensors, got {type(stored).__name__}")
        missing = [name for name in ATTRIBUTES if name not in stored]
        if missing:
            raise ValueError(f"{path}: scene file lacks Gaussian attributes {missing} (needs {list(ATTRIBUTES)})")
        return cls(**{name: stored[name] for name in ATTRIBUTES})


def quaternion_to_rotation(quaternions: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [N, 3, 3] of quaternions [N, 4] (w, x, y, z), normalised first."""
    w, x, y, z = torch.nn.functional.normalize(quaternions, dim=-1).unbind(-1)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def covariances(gaussians: Gaussians) -> torch.Tensor:
    """World-space covariances Σ = R S Sᵀ Rᵀ [N, 3, 3]."""
    scaled = quaternion_to_rotation(gaussians.quaternions) * torch.exp(gaussians.log_scales)[:, None, :]
    return scaled @ scaled.transpose(-1, -2)


@dataclass
class Camera:
    """A pinhole camera: ``world_to_camera`` [4, 4] (OpenCV axes: x right, y down, z forward) and the horizontal
    field of view ``fov_x`` in radians; the principal point is the image centre and pixels are square."""

    world_to_camera: torch.Tensor
    fov_x: float

    def __post_init__(self) -> None:
        if not isinstance(self.world_to_camera, torch.Tensor) or tuple(self.world_to_camera.shape) != (4, 4):
            raise ValueError(f"Camera: world_to_camera must be a [4, 4] tensor, got {self.world_to_camera!r:.60}")
        if not 0.0 < float(self.fov_x) < math.pi:
            raise ValueError(f"Camera: fov_x={self.fov_x!r} is invalid, expected radians in (0, pi)")

    def intrinsics(self, height: int, width: int) -> tuple[float, float, float, float]:
        """(f_x, f_y, c_x, c_y) in pixels for an image of ``height`` x ``width``."""
        focal = 0.5 * width / math.tan(0.5 * float(self.fov_x))
        return focal, focal, 0.5 * width, 0.5 * height

    @property
    def position(self) -> torch.Tensor:
        """The camera centre in world coordinates, -Wᵀ t."""
        rotation, translation = self.world_to_camera[:3, :3], self.world_to_camera[:3, 3]
        return -rotation.T @ translation


def look_at(position: torch.Tensor, target: torch.Tensor, fov_x: float, up: tuple[float, ...] = (0, 0, 1)) -> Camera:
    """A camera at ``position`` looking at ``target`` with world ``up`` (z by default) pointing up in the image."""
    forward = torch.nn.functional.normalize(target - position, dim=0)
    right = torch.nn.functional.normalize(torch.linalg.cross(forward, torch.tensor(up, dtype=position.dtype)), dim=0)
    down = torch.linalg.cross(forward, right)
    rotation = torch.stack([right, down, forward])
    matrix = torch.eye(4, dtype=position.dtype)
    matrix[:3, :3], matrix[:3, 3] = rotation, -rotation @ position
    return Camera(matrix, fov_x)


def camera_ring(
    count: int, radius: float = 4.0, height: float = 1.5, fov_x: float = 0.9, target: tuple[float, ...] = (0, 0, 0)
) -> list[Camera]:
    """``count`` cameras evenly spaced on a horizontal circle of ``radius`` at ``height``, all looking at ``target``."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} is invalid, expected an integer >= 1")
    if radius <= 0:
        raise ValueError(f"radius={radius!r} is invalid, expected a number > 0")
    centre = torch.tensor(target, dtype=torch.float32)
    cameras = []
    for k in range(count):
        angle = 2 * math.pi * k / count
        offset = torch.tensor([radius * math.cos(angle), radius * math.sin(angle), height])
        cameras.append(look_at(centre + offset, centre, fov_x))
    return cameras


def image_shape(image_size: int | tuple[int, int]) -> tuple[int, int]:
    """(H, W) from an int (square) or a pair; anything else raises."""
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if len(size) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size):
        raise ValueError(f"image_size={image_size!r} is invalid, expected an integer >= 1 or a pair (H, W) of them")
    return size


def project(gaussians: Gaussians, camera: Camera, height: int, width: int) -> dict[str, torch.Tensor]:
    """Screen means [M, 2], screen covariances Σ' [M, 2, 2], their inverses (conics) and depths [M] of the M
    Gaussians in front of the near plane, with their indices ``kept`` [M] (EWA projection, module docstring)."""
    fx, fy, cx, cy = camera.intrinsics(height, width)
    w2c = camera.world_to_camera.to(gaussians.means)
    rotation, translation = w2c[:3, :3], w2c[:3, 3]
    points = gaussians.means @ rotation.T + translation
    kept = torch.nonzero(points[:, 2] > NEAR).squeeze(1)
    x, y, z = points[kept].unbind(-1)
    zero = torch.zeros_like(z)
    jacobian = torch.stack(
        [torch.stack([fx / z, zero, -fx * x / z**2], -1), torch.stack([zero, fy / z, -fy * y / z**2], -1)], dim=-2
    )
    transform = jacobian @ rotation
    screen = transform @ covariances(gaussians)[kept] @ transform.transpose(-1, -2)
    screen = screen + DILATION * torch.eye(2, dtype=screen.dtype)
    means2d = torch.stack([fx * x / z + cx, fy * y / z + cy], dim=-1)
    return {"means2d": means2d, "conics": torch.linalg.inv(screen), "screen": screen, "depths": z, "kept": kept}


def screen_quadratic(means2d: torch.Tensor, conics: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """dᵀ Σ'⁻¹ d [M, H * W] for d = u - means2d at every pixel centre u = (j + 0.5, i + 0.5) of pixel (i, j),
    expanded into one matmul: [u², 2uv, v², u, v, 1] · per-Gaussian coefficients (coordinates taken from the
    image centre to keep float32 cancellation small)."""
    dtype = means2d.dtype
    v, u = torch.meshgrid(
        torch.arange(height, dtype=dtype) + 0.5, torch.arange(width, dtype=dtype) + 0.5, indexing="ij"
    )
    centre = torch.tensor([0.5 * width, 0.5 * height], dtype=dtype)
    u, v = u.reshape(-1) - centre[0], v.reshape(-1) - centre[1]
    features = torch.stack([u * u, 2 * u * v, v * v, u, v, torch.ones_like(u)])
    a, b, c = conics[:, 0, 0], 0.5 * (conics[:, 0, 1] + conics[:, 1, 0]), conics[:, 1, 1]
    mx, my = (means2d - centre).unbind(-1)
    coefficients = torch.stack(
        [a, b, c, -2 * (a * mx + b * my), -2 * (b * mx + c * my), a * mx * mx + 2 * b * mx * my + c * my * my], -1
    )
    return coefficients @ features


def render(
    gaussians: Gaussians,
    camera: Camera,
    image_size: int | tuple[int, int],
    *,
    background: torch.Tensor | None = None,
    alpha_min: float = ALPHA_MIN,
    method: str = "culled",
    backend: str = "torch",
) -> torch.Tensor:
    """The image [3, H, W] of ``gaussians`` seen by ``camera`` (module docstring), differentiable in every
    attribute. ``background``: RGB [3] (black by default). ``alpha_min``: the released cut (0 makes the image a
    smooth function of the attributes; needs ``method="dense"``). ``method``: "culled" composites each Gaussian
    only inside its footprint (:func:`composite_culled`), "dense" at every pixel (:func:`composite_dense`, the
    reference); both give the same image. ``backend="gsplat"`` uses gsplat's CUDA rasterizer when it imports."""
    height, width = image_shape(image_size)
    if method not in COMPOSITORS:
        raise ValueError(f"method={method!r} is invalid, expected one of {sorted(COMPOSITORS)}")
    if not 0.0 <= float(alpha_min) < ALPHA_MAX or (method == "culled" and alpha_min == 0):
        low = "0 < alpha_min" if method == "culled" else "0 <= alpha_min"
        raise ValueError(f"alpha_min={alpha_min!r} is invalid for method={method!r}, expected {low} < {ALPHA_MAX}")
    if background is None:
        background = torch.zeros(3, dtype=gaussians.means.dtype, device=gaussians.means.device)
    if backend == "gsplat":
        return render_gsplat(gaussians, camera, height, width, background)
    if backend != "torch":
        raise ValueError(f"backend={backend!r} is invalid, expected 'torch' or 'gsplat'")
    projected = project(gaussians, camera, height, width)
    if len(projected["kept"]) == 0:
        return background[:, None, None].expand(3, height, width).clone()
    order = torch.argsort(projected["depths"])
    kept = projected["kept"][order]
    front_to_back = {
        "means2d": projected["means2d"][order],
        "conics": projected["conics"][order],
        "screen": projected["screen"][order],
        "opacities": gaussians.opacities[kept],
        "colours": gaussians.colours[kept],
    }
    pixels = COMPOSITORS[method](front_to_back, height, width, alpha_min, background)
    return pixels.T.reshape(3, height, width)


def composite_dense(
    projected: dict[str, torch.Tensor], height: int, width: int, alpha_min: float, background: torch.Tensor
) -> torch.Tensor:
    """Pixels [H * W, 3] of the depth-sorted Gaussians composited at every pixel ([M, H * W] tensors)."""
    quadratic = screen_quadratic(projected["means2d"], projected["conics"], height, width)
    alpha = torch.clamp(projected["opacities"][:, None] * torch.exp(-0.5 * quadratic), max=ALPHA_MAX)
    alpha = torch.where(alpha >= alpha_min, alpha, torch.zeros_like(alpha))
    transmittance = torch.cumprod(1 - alpha, dim=0)
    before = torch.cat([torch.ones_like(transmittance[:1]), transmittance[:-1]])
    return (alpha * before).T @ projected["colours"] + transmittance[-1:].T * background


def footprint_pairs(
    projected: dict[str, torch.Tensor], height: int, width: int, alpha_min: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Gaussian, pixel) index pairs [P] of every pixel whose centre lies in a Gaussian's footprint, sorted by
    pixel and, within a pixel, front to back. The footprint is the bounding box of the ellipse where
    o exp(-½ q) >= alpha_min, i.e. q <= q* = 2 ln(o / alpha_min): |u - π(p)_x| <= sqrt(q* Σ'_xx),
    |v - π(p)_y| <= sqrt(q* Σ'_yy). No pixel outside it has α >= alpha_min, so culling changes no pixel."""
    with torch.no_grad():
        level = 2 * torch.log(projected["opacities"] / alpha_min)
        reach = torch.sqrt(level.clamp(min=0)[:, None] * torch.diagonal(projected["screen"], dim1=-2, dim2=-1))
        centre = projected["means2d"] - 0.5  # pixel (i, j) has its centre at (j + 0.5, i + 0.5)
        limit = torch.tensor([width - 1, height - 1], device=centre.device)
        low = torch.ceil(centre - reach - 1e-3).clamp(min=0).long()
        high = torch.minimum(torch.floor(centre + reach + 1e-3).long(), limit)
        extent = (high - low + 1).clamp(min=0) * (level > 0)[:, None]
        counts = extent[:, 0] * extent[:, 1]
        gaussian = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
        # per pair: its box's first pixel, box width and first pair (one gather of a per-Gaussian table)
        table = torch.stack([low[:, 1] * width + low[:, 0], extent[:, 0], torch.cumsum(counts, 0) - counts])
        first_pixel, box_width, first_pair = table.index_select(1, gaussian)  # rows [3, P]: contiguous
        offset = torch.arange(len(gaussian), device=counts.device) - first_pair
        rows = torch.div(offset, box_width, rounding_mode="floor")
        pixel = first_pixel + rows * width + (offset - rows * box_width)
        pixel, order = torch.sort(pixel, stable=True)  # stable: keeps the depth order within a pixel
    return gaussian.index_select(0, order), pixel


def composite_culled(
    projected: dict[str, torch.Tensor], height: int, width: int, alpha_min: float, background: torch.Tensor
) -> torch.Tensor:
    """Pixels [H * W, 3] composited over the footprint pairs only (3DGS-style culling, exact box): per pair
    α = min(0.99, o exp(-½ dᵀ Σ'⁻¹ d)), then the exclusive transmittance T = exp(Σ_{earlier pairs of the pixel}
    log(1 - α)) as a segmented cumulative sum (float64, so long pixel runs do not cancel) and C = Σ c α T + T_end b
    by scatter-add."""
    gaussian, pixel = footprint_pairs(projected, height, width, alpha_min)
    conics = projected["conics"]
    per_gaussian = torch.cat(  # rows [9, P], so each attribute is contiguous (strided columns are several x slower)
        [
            projected["means2d"].T,
            torch.stack([conics[:, 0, 0], 0.5 * (conics[:, 0, 1] + conics[:, 1, 0]), conics[:, 1, 1]]),
            projected["opacities"][None],
            projected["colours"].T,
        ]
    ).index_select(1, gaussian)
    mx, my, a, b, c, opacity = per_gaussian[:6]
    dx = (pixel % width).to(mx) + 0.5 - mx
    dy = torch.div(pixel, width, rounding_mode="floor").to(my) + 0.5 - my
    alpha = torch.clamp(opacity * torch.exp(-0.5 * (a * dx * dx + 2 * b * dx * dy + c * dy * dy)), max=ALPHA_MAX)
    alpha = torch.where(alpha >= alpha_min, alpha, torch.zeros_like(alpha))
    log_clear = torch.log1p(-alpha).double()
    running = torch.cumsum(log_clear, 0) - log_clear  # exclusive over all pairs; minus each pixel's first entry
    pairs_per_pixel = torch.bincount(pixel, minlength=height * width)
    first = torch.cumsum(pairs_per_pixel, 0) - pairs_per_pixel  # = P for the empty pixels at the end: padded
    start = torch.cat([running, running.new_zeros(1)]).index_select(0, first)
    before = torch.exp(running - start.index_select(0, pixel)).to(alpha)
    pixels = torch.zeros(3, height * width, dtype=alpha.dtype, device=alpha.device)
    pixels = pixels.index_add(1, pixel, (alpha * before) * per_gaussian[6:]).T
    clear = torch.zeros(height * width, dtype=log_clear.dtype, device=alpha.device).index_add(0, pixel, log_clear)
    return pixels + torch.exp(clear).to(alpha)[:, None] * background


COMPOSITORS = {"culled": composite_culled, "dense": composite_dense}


def render_gsplat(
    gaussians: Gaussians, camera: Camera, height: int, width: int, background: torch.Tensor
) -> torch.Tensor:
    """The same image by gsplat's ``rasterization`` (CUDA; gsplat >= 1.0 with its default eps2d = 0.3)."""
    try:
        from gsplat import rasterization
    except ImportError as error:
        raise ValueError("backend='gsplat' needs the gsplat package (CUDA): pip install gsplat") from error
    fx, fy, cx, cy = camera.intrinsics(height, width)
    device = gaussians.means.device
    intrinsics = torch.tensor([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=gaussians.means.dtype, device=device)
    colours, _, _ = rasterization(
        gaussians.means,
        torch.nn.functional.normalize(gaussians.quaternions, dim=-1),
        torch.exp(gaussians.log_scales),
        gaussians.opacities,
        gaussians.colours,
        camera.world_to_camera.to(gaussians.means)[None],
        intrinsics[None],
        width,
        height,
        near_plane=NEAR,
        backgrounds=background[None],
    )
    return colours[0].permute(2, 0, 1)
