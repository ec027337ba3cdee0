"""DEGauss: a defense of 3D Gaussian-splatting scenes against instruction-driven 3D editing, with its baselines.

"DEGauss: Defending against malicious 3D editing for Gaussian splatting" (NeurIPS 2025, OpenReview Lm4VIXVIuy;
no public code; only the abstract could be read here, see the method page). The protector perturbs the scene's
colours, opacities and positions, θ̃ = θ + δ, so that an editor E guided by an instruction c fails from every view,
while the protected renders x̃_v = R(θ̃, v) stay photorealistic next to the originals x_v = R(θ, v):

    per-view loss (minimised):  ℓ_v(δ) = λ_sem s(φ(x̃_v), φ(x_v)) + λ_dir s(g(x̃_v, c), g(x_v, c)),
                                s(a, b) = (1 + cos(a, b)) / 2 ∈ [0, 1]

with φ the editor's representation of the image condition and g its edit direction (guidance): the two terms are
the "dual discrepancy" (semantic deviation 1 - cos of φ, edit-direction deviation 1 - cos of g).

    view-focal gradient fusion:  w_v = (ℓ_v + τ)^γ / Σ_{u ∈ S_t} (ℓ_u + τ)^γ,   ∇_δ = Σ_{v ∈ S_t} w_v ∇_δ ℓ_v

over the K views S_t chosen at step t by farthest-view sampling from a random start (the weights are constants of
the step: views where the defense is weakest, high ℓ_v, get the largest share). Adam on δ, then

    fidelity constraint:  min_v PSNR(x̃_v, x_v) >= ρ  (ρ = 30 dB) over every training view,

enforced after each step by a line search: δ is scaled by s in [0, 1] just inside the boundary (steps
s <- s · 10^((PSNR(s) - ρ)/20), exact when MSE ∝ s²); a step whose line search fails is undone (δ back to the
feasible pre-step value, counted as rejected), so the returned scene always satisfies it on the training views.
Held-out views are not constrained: their fidelity PSNR can fall below ρ. Colours stay in [0, 1] and the losses
see the renders clamped to [0, 1], as the attacker's editor does.

Baselines (:data:`METHODS`): ``uniform`` (γ = 0: equal weights, the dual loss kept), ``photoguard`` (PhotoGuard's
encoder attack, Salman et al. ICML 2023, run per view in 2D with L∞ budget ε and lifted to 3D by fitting δ to the
perturbed views, no view weighting, then the same fidelity projection) and ``random`` (a random δ scaled to the same
fidelity by the same line search).

Notes: docs/methods/degauss.md
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from trustlit.analysis import AnalysisModule
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.metrics.images import psnr
from trustlit.paths import existing_file
from trustlit.protection.editor import (
    Editor,
    EditPairsDataModule,
    InstructionEditor,
    iterative_dataset_update,
    train_editor,
)
from trustlit.protection.scenes import PALETTE, Edit, ProceduralScene, apply_edit, render_views, scene_from_item
from trustlit.protection.splatting import Camera, Gaussians, render

PERTURBED = ("colours", "opacity_logits", "means")
METHODS = ("degauss", "uniform", "photoguard", "random")
logger = logging.getLogger(__name__)


def view_focal_weights(losses: torch.Tensor, tau: float = 0.1, gamma: float = 2.0) -> torch.Tensor:
    """w_v = (ℓ_v + τ)^γ / Σ_u (ℓ_u + τ)^γ for per-view losses ``losses`` [K] >= 0 (detached)."""
    if tau <= 0 or gamma < 0:
        raise ValueError(f"tau={tau!r}, gamma={gamma!r} are invalid, expected tau > 0 and gamma >= 0")
    losses = losses.detach()
    if losses.ndim != 1 or (losses < 0).any():
        raise ValueError(f"losses must be a 1-d tensor of numbers >= 0, got {losses.tolist()}")
    powered = (losses + tau) ** gamma
    return powered / powered.sum()


def farthest_view_sampling(positions: torch.Tensor, count: int, start: int = 0) -> list[int]:
    """Indices of ``count`` camera centres from ``positions`` [V, 3]: ``start``, then repeatedly the centre
    farthest from every one chosen so far (ties: the lowest index)."""
    views = positions.shape[0]
    if not 1 <= count <= views or not 0 <= start < views:
        raise ValueError(f"count={count!r}, start={start!r} are invalid for {views} views: 1 <= count <= {views}")
    chosen = [start]
    distance = (positions - positions[start]).norm(dim=1)
    while len(chosen) < count:
        chosen.append(int(torch.argmax(distance)))
        distance = torch.minimum(distance, (positions - positions[chosen[-1]]).norm(dim=1))
    return chosen


def similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """s(a, b) = (1 + cos(a, b)) / 2 per leading index, over everything else."""
    return 0.5 * (1 + torch.nn.functional.cosine_similarity(a.flatten(1), b.flatten(1), dim=1))


def dual_discrepancy_losses(
    editor: Editor,
    protected: torch.Tensor,
    original: torch.Tensor,
    instruction: str,
    semantic_weight: float = 1.0,
    direction_weight: float = 1.0,
) -> torch.Tensor:
    """ℓ_v [V] of the protected renders [V, 3, H, W] against the original renders (module docstring)."""
    with torch.no_grad():
        clean_features, clean_direction = editor.features(original), editor.edit_direction(original, instruction)
    semantic = similarity(editor.features(protected), clean_features)
    direction = similarity(editor.edit_direction(protected, instruction), clean_direction)
    return semantic_weight * semantic + direction_weight * direction


def perturbed(scene: Gaussians, delta: dict[str, torch.Tensor], scale: float = 1.0) -> Gaussians:
    """The scene with ``scale`` · δ added to the perturbed attributes, colours clamped to [0, 1] (or to the
    scene's own colour where that lies outside, so δ = 0 is the scene itself)."""
    tensors = {k: v + scale * delta[k] if k in delta else v for k, v in scene.tensors().items()}
    tensors["colours"] = tensors["colours"].clamp(scene.colours.clamp(max=0), scene.colours.clamp(min=1))
    return Gaussians(**tensors)


def min_psnr(scene: Gaussians, references: torch.Tensor, cameras: list[Camera]) -> float:
    with torch.no_grad():
        return float(psnr(render_views(scene, cameras, references.shape[-1]), references).min())


def project_fidelity(
    scene: Gaussians,
    delta: dict[str, torch.Tensor],
    references: torch.Tensor,
    cameras: list[Camera],
    psnr_floor: float,
    tries: int = 8,
) -> float | None:
    """A scale s in [0, 1] with min_v PSNR(R(θ + s δ, v), x_v) >= ``psnr_floor``, just inside the boundary: 1 if
    δ is feasible, else line-search steps s <- s · 10^((PSNR(s) - ρ) / 20) · 0.999 (exact where the renders are
    linear in s, MSE ∝ s²) until feasible; None when still infeasible after ``tries`` steps."""
    current, scale = min_psnr(perturbed(scene, delta), references, cameras), 1.0
    for _ in range(tries):
        if current >= psnr_floor:
            return scale
        scale *= 10 ** ((current - psnr_floor) / 20) * 0.999
        current = min_psnr(perturbed(scene, delta, scale), references, cameras)
    return scale if current >= psnr_floor else None


@dataclass(frozen=True)
class DEGaussConfig:
    """DEGauss's knobs (the method page gives the defaults and why). ``lr``: Adam step on colours; opacity
    logits and positions take ``lr`` times their ratio in ``ratios``."""

    steps: int = 60
    views_per_step: int = 4
    tau: float = 0.1
    gamma: float = 2.0
    semantic_weight: float = 1.0
    direction_weight: float = 1.0
    lr: float = 0.02
    ratios: tuple[float, float, float] = (1.0, 2.0, 0.05)
    psnr_floor: float = 30.0
    photoguard_epsilon: float = 8 / 255
    photoguard_steps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "views_per_step", "photoguard_steps"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"DEGaussConfig: {name}={getattr(self, name)!r} is invalid, expected an integer >= 1")
        for name in ("tau", "lr", "photoguard_epsilon"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DEGaussConfig: {name}={getattr(self, name)!r} is invalid, expected a number > 0")
        if self.gamma < 0 or self.semantic_weight < 0 or self.direction_weight < 0:
            raise ValueError("DEGaussConfig: gamma, semantic_weight and direction_weight must be >= 0")


@dataclass(frozen=True)
class Protection:
    """A protected scene, the optimised loss per step and how many steps were undone by the fidelity projection."""

    scene: Gaussians
    history: list[float]
    rejected_steps: int = 0


def zero_delta(scene: Gaussians) -> dict[str, torch.Tensor]:
    return {k: torch.zeros_like(getattr(scene, k), requires_grad=True) for k in PERTURBED}


def adam_on(delta: dict[str, torch.Tensor], config: DEGaussConfig) -> torch.optim.Adam:
    groups = [{"params": [delta[k]], "lr": config.lr * r} for k, r in zip(PERTURBED, config.ratios, strict=True)]
    return torch.optim.Adam(groups)


def optimise_views(
    scene: Gaussians,
    cameras: list[Camera],
    references: torch.Tensor,
    config: DEGaussConfig,
    step_loss: Callable[[Gaussians, list[int], torch.Generator], torch.Tensor],
) -> Protection:
    """Adam on δ with the fidelity projection after each step; ``step_loss(protected, views, generator)`` is the
    step's objective on the views chosen by farthest-view sampling. A step whose line search fails is undone
    (δ restored to its feasible pre-step value, not zeroed) and counted in ``rejected_steps``."""
    delta, generator = zero_delta(scene), torch.Generator().manual_seed(config.seed)
    optimiser = adam_on(delta, config)
    positions = torch.stack([camera.position for camera in cameras])
    history, rejected = [], 0
    for _ in range(config.steps):
        start = int(torch.randint(0, len(cameras), (1,), generator=generator))
        views = farthest_view_sampling(positions, min(config.views_per_step, len(cameras)), start)
        optimiser.zero_grad()
        loss = step_loss(perturbed(scene, delta), views, generator)
        loss.backward()
        feasible = {k: v.detach().clone() for k, v in delta.items()}
        optimiser.step()
        history.append(loss.item())
        with torch.no_grad():
            scale = project_fidelity(scene, delta, references, cameras, config.psnr_floor)
            for key, value in delta.items():
                if scale is None:
                    value.copy_(feasible[key])
                else:
                    value.mul_(scale)
        rejected += scale is None
    if rejected:
        logger.warning("DEGauss: %d of %d steps undone (line search found no feasible scale)", rejected, config.steps)
    return Protection(perturbed(scene, {k: v.detach() for k, v in delta.items()}), history, rejected)


def degauss(
    scene: Gaussians,
    cameras: list[Camera],
    editor: Editor,
    instructions: Sequence[str],
    image_size: int,
    config: DEGaussConfig = DEGaussConfig(),
) -> Protection:
    """The DEGauss-protected scene (module docstring; ``gamma = 0`` is the uniform-weight baseline) with the
    fused loss per step. Each step draws one of ``instructions`` (the edits the protector anticipates); the loss
    sees renders clamped to [0, 1], what the attacker's editor receives."""
    if not instructions:
        raise ValueError("instructions must name at least one edit to defend against")
    references = render_views(scene, cameras, image_size).detach()
    seen = references.clamp(0, 1)

    def step_loss(protected: Gaussians, views: list[int], generator: torch.Generator) -> torch.Tensor:
        instruction = instructions[int(torch.randint(0, len(instructions), (1,), generator=generator))]
        renders = render_views(protected, [cameras[v] for v in views], image_size).clamp(0, 1)
        losses = dual_discrepancy_losses(editor, renders, seen[views], instruction,
                                         config.semantic_weight, config.direction_weight)  # fmt: skip
        return (view_focal_weights(losses, config.tau, config.gamma) * losses).sum()

    return optimise_views(scene, cameras, references, config, step_loss)


def photoguard_views(editor: Editor, images: torch.Tensor, epsilon: float, steps: int) -> torch.Tensor:
    """PhotoGuard's encoder attack per image: PGD (step ε/4, sign gradient) within ||η||∞ <= ε and [0, 1]
    minimising ||φ(x + η) - φ(grey)||² (the released target is a grey image's latent)."""
    target = editor.features(torch.full_like(images, 0.5)).detach()
    noise = torch.zeros_like(images, requires_grad=True)
    for _ in range(steps):
        loss = ((editor.features(images + noise) - target) ** 2).sum()
        (gradient,) = torch.autograd.grad(loss, noise)
        with torch.no_grad():
            noise -= epsilon / 4 * gradient.sign()
            noise.clamp_(-epsilon, epsilon)
            noise.copy_((images + noise).clamp(0, 1) - images)
    return (images + noise).detach()


def photoguard_lifted(
    scene: Gaussians, cameras: list[Camera], editor: Editor, image_size: int, config: DEGaussConfig = DEGaussConfig()
) -> Protection:
    """Per-view 2D PhotoGuard perturbations lifted to 3D: δ fitted to the perturbed views (renders clamped to
    [0, 1]) by the same Adam and fidelity projection, every view weighted alike (module docstring)."""
    references = render_views(scene, cameras, image_size).detach()
    targets = photoguard_views(editor, references.clamp(0, 1), config.photoguard_epsilon, config.photoguard_steps)

    def step_loss(protected: Gaussians, views: list[int], generator: torch.Generator) -> torch.Tensor:
        renders = render_views(protected, [cameras[v] for v in views], image_size).clamp(0, 1)
        return ((renders - targets[views]) ** 2).mean()

    return optimise_views(scene, cameras, references, config, step_loss)


def random_perturbation(
    scene: Gaussians, cameras: list[Camera], image_size: int, psnr_floor: float, seed: int = 0,
    ratios: tuple[float, float, float] = DEGaussConfig.ratios,
) -> Protection:  # fmt: skip
    """A random δ (standard normal per attribute, times ``ratios``) scaled to the largest size that keeps
    min_v PSNR >= ``psnr_floor``: the control of equal fidelity (the scene itself if the line search fails)."""
    generator = torch.Generator().manual_seed(seed)
    delta = {k: r * torch.randn(getattr(scene, k).shape, generator=generator)
             for k, r in zip(PERTURBED, ratios, strict=True)}  # fmt: skip
    references = render_views(scene, cameras, image_size).detach()
    scale = project_fidelity(scene, delta, references, cameras, psnr_floor, tries=20)
    return Protection(perturbed(scene, delta, scale or 0.0), [], int(scale is None))


def protect(
    method: str,
    scene: Gaussians,
    cameras: list[Camera],
    editor: Editor,
    instructions: Sequence[str],
    image_size: int,
    config: DEGaussConfig = DEGaussConfig(),
) -> Protection:
    """The scene protected by ``method`` (one of :data:`METHODS`)."""
    if method == "degauss":
        return degauss(scene, cameras, editor, instructions, image_size, config)
    if method == "uniform":
        uniform = DEGaussConfig(**{**config.__dict__, "gamma": 0.0})
        return degauss(scene, cameras, editor, instructions, image_size, uniform)
    if method == "photoguard":
        return photoguard_lifted(scene, cameras, editor, image_size, config)
    if method == "random":
        return random_perturbation(scene, cameras, image_size, config.psnr_floor, config.seed, config.ratios)
    raise ValueError(f"method={method!r} is invalid, expected one of {METHODS}")


def attack_metrics(
    original: Gaussians,
    protected: Gaussians,
    edited: Gaussians,
    intended: Gaussians,
    cameras: list[Camera],
    image_size: int,
) -> dict[str, float]:
    """On ``cameras`` (held-out views): the protection's fidelity (PSNR, SSIM of protected vs original renders)
    and the attack's success: PSNR of the edited scene's renders to the intended edit's, and the edit-direction
    similarity cos(R(edited) - R(original), R(intended) - R(original)) (a pixel-space analogue of CLIP's
    directional similarity), means over views."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    with torch.no_grad():
        clean, guarded, result, target = (render_views(g, cameras, image_size).clamp(0, 1)
                                          for g in (original, protected, edited, intended))  # fmt: skip
    direction = torch.nn.functional.cosine_similarity((result - clean).flatten(1), (target - clean).flatten(1))
    return {
        "fidelity_psnr": float(psnr(guarded, clean).mean()),
        "fidelity_ssim": float(structural_similarity_index_measure(guarded, clean, data_range=1.0)),
        "edit_psnr": float(psnr(result, target).mean()),
        "edit_direction": float(direction.mean()),
    }


def family_instructions(scene: ProceduralScene) -> list[str]:
    """Every edit of the family on ``scene``'s objects: each removal and each recolour to another colour."""
    edits = []
    for colour, shape in scene.objects:
        edits.append(Edit("remove", colour, shape).instruction)
        edits.extend(Edit("recolour", colour, shape, other).instruction for other in PALETTE if other != colour)
    return edits


def scene_rows(
    scene: ProceduralScene,
    edit: Edit,
    cameras: tuple[list[Camera], list[Camera]],
    editor: Editor,
    methods: Sequence[str],
    config: DEGaussConfig,
    image_size: int,
    attack: dict[str, int],
    anticipate: str = "attack",
) -> tuple[list[dict[str, Any]], dict[str, Gaussians]]:
    """One row per protection (``none`` first) of one scene attacked by ``edit`` through the iterative dataset
    update (``attack``: rounds, fit_steps), measured from the held-out cameras; and each method's edited scene."""
    train, held_out = cameras
    instructions = [edit.instruction] if anticipate == "attack" else family_instructions(scene)
    intended, references = apply_edit(scene, edit), render_views(scene.gaussians, train, image_size).detach()
    rows, edited_scenes = [], {}
    for method in ("none", *methods):
        started = time.perf_counter()
        protection = Protection(scene.gaussians, []) if method == "none" else protect(
            method, scene.gaussians, train, editor, instructions, image_size, config)  # fmt: skip
        seconds, guarded = time.perf_counter() - started, protection.scene
        edited = iterative_dataset_update(guarded, train, editor, edit.instruction, image_size, **attack)
        metrics = attack_metrics(scene.gaussians, guarded, edited, intended, held_out, image_size)
        rows.append({"method": method, "instruction": edit.instruction, **metrics,
                     "train_min_psnr": min_psnr(guarded, references, train), "seconds": seconds,
                     "rejected_steps": protection.rejected_steps})  # fmt: skip
        edited_scenes[method] = edited
    return rows, edited_scenes


class DEGaussDefense(AnalysisModule):
    """DEGauss and its baselines on the data module's procedural scenes, each attacked by its instruction through
    the STAND-IN editor's iterative dataset update (module docstring; :mod:`trustlit.protection.editor`). Rows:
    fidelity PSNR/SSIM from held-out views (not constrained: can fall below ``psnr_floor``), the smallest
    training-view PSNR (the constraint), edit PSNR to the intended edit and edit-direction similarity, protection
    seconds, steps undone by the projection; printed, in JSON, a PNG and W&B.

    Notes: docs/methods/degauss.md

    Args:
        methods: protections to compare (:data:`METHODS`); the unprotected scene is always the first row.
        steps, views_per_step, tau, gamma, semantic_weight, direction_weight, lr, psnr_floor, photoguard_epsilon,
            photoguard_steps: :class:`DEGaussConfig`.
        anticipate: ``attack`` (the protector knows the instruction) or ``family`` (every edit of the scene).
        attack_rounds, attack_fit_steps: the iterative dataset update's rounds and refit steps per round.
        editor_checkpoint: a Lightning checkpoint of :class:`~trustlit.protection.editor.InstructionEditor`
            (``trustlit fit -c recipes/protection/instruction_editor_procedural.yaml``); None trains one here on
            ``editor_pairs`` generated pairs for ``editor_epochs`` epochs with ``editor_encoder``.
    """

    def __init__(
        self,
        methods: list[str] | None = None,
        steps: PositiveInt = 60,
        views_per_step: PositiveInt = 4,
        tau: PositiveFloat = 0.1,
        gamma: NonNegativeFloat = 2.0,
        semantic_weight: NonNegativeFloat = 1.0,
        direction_weight: NonNegativeFloat = 1.0,
        lr: PositiveFloat = 0.02,
        psnr_floor: PositiveFloat = 30.0,
        photoguard_epsilon: PositiveFloat = 8 / 255,
        photoguard_steps: PositiveInt = 20,
        anticipate: Literal["attack", "family"] = "attack",
        attack_rounds: PositiveInt = 3,
        attack_fit_steps: PositiveInt = 40,
        editor_checkpoint: str | None = None,
        editor_encoder: Literal["minilm", "structured"] = "minilm",
        editor_pairs: PositiveInt = 1024,
        editor_epochs: PositiveInt = 30,
        seed: NonNegativeInt = 0,
        results_file: str = "degauss.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(DEGaussDefense.__init__, locals())
        self.methods = list(METHODS if methods is None else methods)
        if not self.methods or any(m not in METHODS for m in self.methods):
            raise ValueError(f"DEGaussDefense: methods={self.methods!r} is invalid, expected a list of {METHODS}")
        if anticipate not in ("attack", "family"):
            raise ValueError(f"DEGaussDefense: anticipate={anticipate!r} is invalid, expected 'attack' or 'family'")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        h = self.hparams
        self.config = DEGaussConfig(h.steps, h.views_per_step, h.tau, h.gamma, h.semantic_weight, h.direction_weight,
                                    h.lr, psnr_floor=h.psnr_floor, photoguard_epsilon=h.photoguard_epsilon,
                                    photoguard_steps=h.photoguard_steps, seed=h.seed)  # fmt: skip
        self.items: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.items = []

    def update(self, batch: dict[str, Any]) -> None:
        self.items.append(batch)

    def editor(self, image_size: int) -> InstructionEditor:
        h = self.hparams
        if h.editor_checkpoint is not None:
            path = existing_file(h.editor_checkpoint, "editor_checkpoint")
            return InstructionEditor.load_from_checkpoint(path, map_location="cpu").eval()
        pairs = EditPairsDataModule(h.editor_pairs, 1, image_size, h.editor_encoder, seed=h.seed)
        return train_editor(pairs, epochs=h.editor_epochs, seed=h.seed)

    def compute(self) -> dict[str, Any]:
        if not self.items:
            raise ValueError("DEGaussDefense: the data module gave no scene")
        image_size = int(self.items[0]["image_size"])
        attack = {"rounds": self.hparams.attack_rounds, "fit_steps": self.hparams.attack_fit_steps}
        rows, figure_scenes = [], None
        with torch.inference_mode(False), torch.enable_grad():  # the test loop runs without autograd
            editor = self.editor(image_size)
            for item in self.items:
                scene, edit, train, held_out = scene_from_item(item)
                scene_rows_, edited = scene_rows(scene, edit, (train, held_out), editor, self.methods, self.config,
                                                 image_size, attack, self.hparams.anticipate)  # fmt: skip
                rows.extend(scene_rows_)
                figure_scenes = figure_scenes or (scene, edit, held_out[0], edited)
        summary = summarise(rows)
        self.report(summary, figure_scenes, image_size)
        return {"rows": rows, "summary": summary, **{f"{r['method']}/{k}": v for r in summary
                for k, v in r.items() if k != "method"}}  # fmt: skip

    def report(self, summary: list[dict[str, Any]], shown: tuple[Any, ...], image_size: int) -> None:
        header = ["method", *METRICS]
        table = [[row["method"], *(row[k] for k in METRICS)] for row in summary]
        print_table("DEGauss (STAND-IN editor): held-out views, means over scenes", header, table)
        if not self.trainer.is_global_zero:
            return
        path = save_png(edit_figure(*shown, image_size), Path(self.trainer.default_root_dir) / "degauss.png")
        log_to_wandb(self.trainer, "degauss", header=header, rows=table, images=[path])


METRICS = ("fidelity_psnr", "fidelity_ssim", "train_min_psnr", "edit_psnr", "edit_direction", "seconds")


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method, the mean of each metric over scenes (``scenes``: how many)."""
    methods = list(dict.fromkeys(row["method"] for row in rows))
    summary = []
    for method in methods:
        mine = [row for row in rows if row["method"] == method]
        summary.append({"method": method, "scenes": len(mine),
                        **{k: sum(row[k] for row in mine) / len(mine) for k in METRICS}})  # fmt: skip
    return summary


def edit_figure(scene: ProceduralScene, edit: Edit, camera: Camera, edited: dict[str, Gaussians], size: int) -> Any:
    """A held-out view: the original, the intended edit, and each method's result of the attack."""
    panels = {"original": scene.gaussians, "intended": apply_edit(scene, edit), **edited}
    figure, axes = new_figure(ncols=len(panels), figsize=(2.0 * len(panels), 2.4))
    with torch.no_grad():
        for axis, (name, gaussians) in zip(axes, panels.items(), strict=True):
            axis.imshow(render(gaussians, camera, size).clamp(0, 1).permute(1, 2, 0).numpy())
            axis.set_title(name if name in ("original", "intended") else f"edit | {name}", fontsize=8)
            axis.axis("off")
    figure.suptitle(edit.instruction, fontsize=9)
    return figure
