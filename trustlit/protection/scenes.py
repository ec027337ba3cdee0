"""Procedural multi-object Gaussian scenes with known geometry, their edits, and fitting a Gaussian scene to views.

A scene is a grey floor and ``num_objects`` coloured spheres or cubes of distinct palette colours, each made of
small Gaussians on its surface; every Gaussian carries the index of its object (-1 for the floor). Because the
geometry is known, an instruction such as "turn the red sphere blue" or "remove the green cube" has an exact
result: :func:`apply_edit` recolours or deletes that object's Gaussians, and its renders are the intended edit
from any view. Cameras sit on a ring around the scene (:func:`~trustlit.protection.splatting.camera_ring`);
held-out views lie on the same ring halfway between training views.

:class:`GaussianSceneFit` fits N free Gaussians to a scene's training views by Adam on the mean squared error of
the renders (3DGS's photometric fit without densification, L1 replaced by MSE so the fitted PSNR is what is
optimised); :func:`fit_views` is the same fit as a plain loop, used by the editing pipeline to refit a scene.

Notes: docs/methods/gaussian_splatting.md
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from trustlit.hparams import NonNegativeInt, PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.metrics.images import psnr
from trustlit.protection.splatting import ATTRIBUTES, Camera, Gaussians, camera_ring, render

PALETTE = {
    "red": (0.85, 0.12, 0.1),
    "green": (0.15, 0.7, 0.2),
    "blue": (0.12, 0.25, 0.85),
    "yellow": (0.9, 0.8, 0.15),
    "purple": (0.6, 0.2, 0.7),
}
SHAPES = ("sphere", "cube")
FLOOR_COLOUR = (0.55, 0.55, 0.55)
EDIT_KINDS = ("recolour", "remove")
INSTRUCTION = re.compile(rf"^(remove|turn) the ({'|'.join(PALETTE)}) ({'|'.join(SHAPES)})(?: ({'|'.join(PALETTE)}))?$")


@dataclass(frozen=True)
class Edit:
    """Recolour the object of colour ``source`` (and ``shape``) to ``target``, or remove it."""

    kind: str
    source: str
    shape: str
    target: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EDIT_KINDS:
            raise ValueError(f"Edit: kind={self.kind!r} is invalid, expected one of {EDIT_KINDS}")
        if self.source not in PALETTE or self.shape not in SHAPES:
            raise ValueError(f"Edit: source={self.source!r}, shape={self.shape!r} must be in {list(PALETTE)}, {SHAPES}")
        if (self.kind == "recolour") != (self.target in PALETTE and self.target != self.source):
            raise ValueError(f"Edit: target={self.target!r} is invalid for kind={self.kind!r}")

    @classmethod
    def parse(cls, instruction: str) -> Edit:
        """The edit an instruction of the family names ("turn the red cube blue", "remove the green sphere")."""
        match = INSTRUCTION.match(instruction)
        if match is None:
            raise ValueError(f"instruction={instruction!r} is not in the edit family ('turn the red cube blue', ...)")
        kind, source, shape, target = match.groups()
        return cls("remove" if kind == "remove" else "recolour", source, shape, target)

    @property
    def instruction(self) -> str:
        if self.kind == "remove":
            return f"remove the {self.source} {self.shape}"
        return f"turn the {self.source} {self.shape} {self.target}"


@dataclass
class ProceduralScene:
    """Gaussians, their object index ``labels`` [N] (-1: floor) and each object's (colour, shape) in ``objects``."""

    gaussians: Gaussians
    labels: torch.Tensor
    objects: list[tuple[str, str]]


def surface_points(shape: str, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` points on the unit sphere (Fibonacci lattice) or on the faces of the cube [-1, 1]^3 (random)."""
    if shape == "sphere":
        k = torch.arange(count, dtype=torch.float32) + 0.5
        polar, azimuth = torch.acos(1 - 2 * k / count), math.pi * (1 + 5**0.5) * k
        return torch.stack([polar.sin() * azimuth.cos(), polar.sin() * azimuth.sin(), polar.cos()], -1)
    points = 2 * torch.rand(count, 3, generator=generator) - 1
    axis = torch.randint(0, 3, (count,), generator=generator)
    points[torch.arange(count), axis] = torch.where(torch.rand(count, generator=generator) < 0.5, -1.0, 1.0)
    return points


def blob(points: torch.Tensor, scale: float, colour: tuple[float, ...], generator: torch.Generator) -> Gaussians:
    """Near-opaque isotropic Gaussians of ``scale`` at ``points`` with ``colour`` (a little shading jitter)."""
    count = points.shape[0]
    shade = 1 + 0.06 * torch.randn(count, 1, generator=generator)
    return Gaussians(
        means=points,
        log_scales=torch.full((count, 3), math.log(scale)),
        quaternions=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(count, 4).clone(),
        colours=(torch.tensor(colour) * shade).clamp(0, 1),
        opacity_logits=torch.full((count,), 3.0),
    )


def procedural_scene(
    num_objects: int = 3, gaussians_per_object: int = 48, floor_gaussians: int = 64, seed: int = 0
) -> ProceduralScene:
    """Objects of distinct colours on a floor, placed on a circle of radius ~0.8 around the origin."""
    if not 1 <= num_objects <= len(PALETTE):
        raise ValueError(f"num_objects={num_objects!r} is invalid, expected an integer in [1, {len(PALETTE)}]")
    generator = torch.Generator().manual_seed(seed)
    colours = [list(PALETTE)[i] for i in torch.randperm(len(PALETTE), generator=generator)[:num_objects]]
    side = math.ceil(math.sqrt(floor_gaussians))
    grid = torch.linspace(-1.4, 1.4, side)
    floor_xy = torch.cartesian_prod(grid, grid)[:floor_gaussians]
    floor = torch.cat([floor_xy, torch.full((floor_xy.shape[0], 1), -0.45)], dim=1)
    parts = [blob(floor, 1.6 / side, FLOOR_COLOUR, generator)]
    labels = [torch.full((floor.shape[0],), -1)]
    objects = []
    offset = float(torch.rand(1, generator=generator)) * 2 * math.pi
    for index, colour in enumerate(colours):
        shape = SHAPES[int(torch.randint(0, 2, (1,), generator=generator))]
        size = 0.22 + 0.08 * float(torch.rand(1, generator=generator))
        angle = offset + 2 * math.pi * index / num_objects
        centre = torch.tensor([0.8 * math.cos(angle), 0.8 * math.sin(angle), -0.45 + size])
        points = centre + size * surface_points(shape, gaussians_per_object, generator)
        parts.append(blob(points, 0.9 * size / math.sqrt(gaussians_per_object) * 2.2, PALETTE[colour], generator))
        labels.append(torch.full((gaussians_per_object,), index))
        objects.append((colour, shape))
    return ProceduralScene(Gaussians.concat(parts), torch.cat(labels), objects)


def apply_edit(scene: ProceduralScene, edit: Edit) -> Gaussians:
    """The Gaussians of ``scene`` after ``edit`` (its object recoloured or removed): the intended result."""
    if (edit.source, edit.shape) not in scene.objects:
        raise ValueError(f"edit {edit.instruction!r} names no object of the scene {scene.objects}")
    target = scene.labels == scene.objects.index((edit.source, edit.shape))
    if edit.kind == "remove":
        return scene.gaussians.select(~target).detach()
    edited = scene.gaussians.detach()
    edited.colours[target] = (
        edited.colours[target] * torch.tensor(PALETTE[edit.target]) / torch.tensor(PALETTE[edit.source])
    )
    edited.colours.clamp_(0, 1)
    return edited


def random_edit(scene: ProceduralScene, generator: torch.Generator) -> Edit:
    """A uniformly drawn recolour (to a colour absent from the scene) or removal of one of its objects."""
    colour, shape = scene.objects[int(torch.randint(0, len(scene.objects), (1,), generator=generator))]
    if torch.rand(1, generator=generator) < 0.5:
        return Edit("remove", colour, shape)
    unused = [c for c in PALETTE if c not in {c for c, _ in scene.objects}] or [c for c in PALETTE if c != colour]
    return Edit("recolour", colour, shape, unused[int(torch.randint(0, len(unused), (1,), generator=generator))])


def ring_views(views: int, held_out: bool = False, radius: float = 2.7, height: float = 1.6) -> list[Camera]:
    """The training ring of ``views`` cameras, or the held-out ring halfway between its cameras."""
    cameras = camera_ring(2 * views if held_out else views, radius=radius, height=height)
    return cameras[1::2] if held_out else cameras


def render_views(gaussians: Gaussians, cameras: list[Camera], image_size: int) -> torch.Tensor:
    """Renders [V, 3, H, W] of ``gaussians`` from every camera."""
    return torch.stack([render(gaussians, camera, image_size) for camera in cameras])


def initial_gaussians(count: int, seed: int, extent: float = 1.2) -> Gaussians:
    """``count`` small grey Gaussians uniform in the cube [-extent, extent]^3 (the fit's start)."""
    generator = torch.Generator().manual_seed(seed)
    return Gaussians(
        means=extent * (2 * torch.rand(count, 3, generator=generator) - 1),
        log_scales=torch.full((count, 3), math.log(0.06)),
        quaternions=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(count, 4).clone(),
        colours=torch.full((count, 3), 0.5),
        opacity_logits=torch.zeros(count),
    )


def views_loss(gaussians: Gaussians, cameras: list[Camera], images: torch.Tensor) -> torch.Tensor:
    """Mean squared error between the renders of ``gaussians`` and ``images`` [V, 3, H, W]."""
    return ((render_views(gaussians, cameras, images.shape[-1]) - images) ** 2).mean()


def fit_views(
    gaussians: Gaussians, cameras: list[Camera], images: torch.Tensor, steps: int, lr: float = 0.01, batch: int = 4
) -> Gaussians:
    """``gaussians`` fitted to ``images`` by ``steps`` Adam steps on batches of ``batch`` views (a copy)."""
    fitted = gaussians.detach()
    optimiser = attribute_adam({k: t.requires_grad_(True) for k, t in fitted.tensors().items()}, lr)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        chosen = torch.randperm(len(cameras), generator=generator)[:batch].tolist()
        optimiser.zero_grad()
        views_loss(fitted, [cameras[i] for i in chosen], images[chosen]).backward()
        optimiser.step()
    return fitted.detach()


LR_RATIOS = {"means": 1.0, "log_scales": 5.0, "quaternions": 1.0, "colours": 2.5, "opacity_logits": 5.0}


def attribute_adam(tensors: dict[str, torch.Tensor], lr: float) -> torch.optim.Adam:
    """Adam with one learning rate per Gaussian attribute, ``lr`` times :data:`LR_RATIOS` (the released ratios
    of 3DGS up to its position schedule)."""
    return torch.optim.Adam([{"params": [tensors[k]], "lr": lr * ratio} for k, ratio in LR_RATIOS.items()])


def cameras_from_batch(batch: dict[str, torch.Tensor], key: str = "world_to_camera") -> list[Camera]:
    return [Camera(matrix, float(fov)) for matrix, fov in zip(batch[key], batch["fov_x"], strict=True)]


class SceneViews(Dataset):
    """The views of one procedural scene: image [3, H, W], world_to_camera [4, 4] and fov_x per item."""

    def __init__(self, images: torch.Tensor, cameras: list[Camera]) -> None:
        self.images, self.cameras = images, cameras

    def __len__(self) -> int:
        return len(self.cameras)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        camera = self.cameras[index]
        return {"image": self.images[index], "world_to_camera": camera.world_to_camera, "fov_x": camera.fov_x}


class SceneViewsDataModule(L.LightningDataModule):
    """Training views (a ring of ``views`` cameras) and held-out views (val/test: the ring between them) of the
    procedural scene ``seed`` at ``image_size`` pixels, for :class:`GaussianSceneFit`."""

    def __init__(
        self,
        num_objects: PositiveInt = 3,
        gaussians_per_object: PositiveInt = 48,
        floor_gaussians: NonNegativeInt = 64,
        views: PositiveInt = 16,
        image_size: PositiveInt = 32,
        batch_size: PositiveInt = 4,
        seed: NonNegativeInt = 0,
    ) -> None:
        check_arguments(SceneViewsDataModule.__init__, locals())
        super().__init__()
        self.save_hyperparameters()
        plain_numbers(self.hparams)

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        scene = procedural_scene(h.num_objects, h.gaussians_per_object, h.floor_gaussians, h.seed)
        splits = {"train": ring_views(h.views), "held_out": ring_views(h.views, held_out=True)}
        self.splits = {name: SceneViews(render_views(scene.gaussians, cams, h.image_size), cams)
                       for name, cams in splits.items()}  # fmt: skip

    def loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.hparams.batch_size, shuffle=shuffle)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("held_out", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.loader("held_out", shuffle=False)


class GaussianSceneFit(L.LightningModule):
    """Fit ``num_gaussians`` free Gaussians to a scene's views (module docstring): Adam on the renders' MSE with
    :func:`attribute_adam`'s learning rates. Logs ``train/psnr`` and
    ``val/psnr``/``test/psnr`` on held-out views. :meth:`gaussians` returns the fitted scene, also written to
    ``<default_root_dir>/gaussians.pt`` when the fit ends."""

    def __init__(self, num_gaussians: PositiveInt = 512, lr: PositiveFloat = 0.01, seed: NonNegativeInt = 0) -> None:
        check_arguments(GaussianSceneFit.__init__, locals())
        super().__init__()
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        start = initial_gaussians(num_gaussians, seed)
        self.attributes = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in start.tensors().items()})

    def gaussians(self) -> Gaussians:
        return Gaussians(**{name: self.attributes[name] for name in ATTRIBUTES})

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        renders = render_views(self.gaussians(), cameras_from_batch(batch), batch["image"].shape[-1])
        loss = ((renders - batch["image"]) ** 2).mean()
        self.log(f"{stage}/loss", loss, batch_size=len(renders))
        self.log(f"{stage}/psnr", psnr(renders.detach(), batch["image"]).mean(), batch_size=len(renders))
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return attribute_adam(dict(self.attributes), self.hparams.lr)

    def on_fit_end(self) -> None:
        if self.trainer.is_global_zero:  # the fitted scene as a scene file (Gaussians.load reads it)
            self.gaussians().detach().save(Path(self.trainer.default_root_dir) / "gaussians.pt")


def scene_item(scene: ProceduralScene, edit: Edit, views: int, image_size: int) -> dict[str, Any]:
    """One scene as a batch: its Gaussian attributes, ``labels``, ``objects`` ("red sphere;blue cube"), the edit's
    ``instruction``, the training and held-out ring cameras [V, 4, 4], ``fov_x`` and ``image_size``."""
    train, held_out = ring_views(views), ring_views(views, held_out=True)
    return {
        **scene.gaussians.tensors(),
        "labels": scene.labels,
        "objects": ";".join(f"{colour} {shape}" for colour, shape in scene.objects),
        "instruction": edit.instruction,
        "train_cameras": torch.stack([c.world_to_camera for c in train]),
        "held_out_cameras": torch.stack([c.world_to_camera for c in held_out]),
        "fov_x": train[0].fov_x,
        "image_size": image_size,
    }


def scene_from_item(item: dict[str, Any]) -> tuple[ProceduralScene, Edit, list[Camera], list[Camera]]:
    """The inverse of :func:`scene_item`: scene, edit, training cameras and held-out cameras."""
    missing = [name for name in ATTRIBUTES if name not in item]
    if missing:
        raise ValueError(f"scene item lacks Gaussian attributes {missing} (needs {list(ATTRIBUTES)})")
    objects = [tuple(entry.split(" ")) for entry in item["objects"].split(";")]
    scene = ProceduralScene(Gaussians(**{k: item[k] for k in ATTRIBUTES}), item["labels"], objects)
    edit = Edit.parse(item["instruction"])
    fov = float(item["fov_x"])
    cameras = [[Camera(m, fov) for m in item[key]] for key in ("train_cameras", "held_out_cameras")]
    return scene, edit, cameras[0], cameras[1]


class ProceduralSceneDataModule(L.LightningDataModule):
    """``scenes`` procedural scenes (seeds ``seed``, ``seed + 1``, ...) each with a random edit, one scene per test
    batch (:func:`scene_item`), for the DEGauss analysis."""

    def __init__(
        self,
        scenes: PositiveInt = 1,
        num_objects: PositiveInt = 3,
        gaussians_per_object: PositiveInt = 48,
        floor_gaussians: NonNegativeInt = 64,
        views: PositiveInt = 16,
        image_size: PositiveInt = 32,
        seed: NonNegativeInt = 0,
    ) -> None:
        check_arguments(ProceduralSceneDataModule.__init__, locals())
        super().__init__()
        self.save_hyperparameters()
        plain_numbers(self.hparams)

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        self.items = []
        for index in range(h.scenes):
            scene = procedural_scene(h.num_objects, h.gaussians_per_object, h.floor_gaussians, h.seed + index)
            edit = random_edit(scene, torch.Generator().manual_seed(h.seed + index))
            self.items.append(scene_item(scene, edit, h.views, h.image_size))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.items, batch_size=None, collate_fn=lambda item: item)
