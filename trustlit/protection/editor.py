"""Instruction-driven editing of Gaussian scenes: the ``Editor`` interface, a STAND-IN editor trained here, an
InstructPix2Pix adapter, and the iterative dataset update that carries 2D edits into the 3D scene.

STAND-IN. No instruction-driven image editor (InstructPix2Pix, Brooks et al. CVPR 2023) can be loaded offline
here, so :class:`InstructionEditor` is a small FiLM-conditioned UNet that regresses the edited image from the
image and the instruction's sentence embedding (MiniLM, offline), trained on exact before/after renders of the
procedural scenes' edit family (recolour an object, remove an object; :mod:`trustlit.protection.scenes`). It is
a one-step regressor, not a diffusion model: attacks on it test the pipeline and the defense's mechanics, not
transfer to real editors. :class:`InstructPix2PixEditor` wraps diffusers' ``StableDiffusionInstructPix2PixPipeline``
for users with the weights behind the same interface.

An editor exposes what the defense and the attack need:
- ``edit(images, instruction)``: the edited images [B, 3, H, W] in [0, 1] (no gradient needed);
- ``features(images)``: the representation of the image condition (differentiable): the stand-in's
  instruction-free encoder bottleneck, InstructPix2Pix's VAE latent;
- ``edit_direction(images, instruction)``: the guidance direction of the edit (differentiable): the stand-in's
  predicted change E(x, c) - x, InstructPix2Pix's text guidance ε(z_t, x, c) - ε(z_t, x, ∅) at one timestep.

Iterative dataset update (Haque et al., Instruct-NeRF2NeRF, ICCV 2023; GaussianEditor edits renders the same
way): the attacker's dataset starts as renders of the scene it received; each round edits the current renders of
``views_per_round`` views (cycling through the ring), replaces those images and refits the scene to the dataset.

Notes: docs/methods/degauss.md
"""

from __future__ import annotations

from typing import Any, Protocol

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trustlit.hparams import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.protection.scenes import (
    EDIT_KINDS,
    PALETTE,
    SHAPES,
    Edit,
    apply_edit,
    fit_views,
    procedural_scene,
    random_edit,
    render_views,
)
from trustlit.protection.splatting import Camera, Gaussians, look_at, render

INSTRUCTION_ENCODERS = ("minilm", "structured")


class Editor(Protocol):
    """What the editing pipeline and DEGauss call (module docstring)."""

    def edit(self, images: torch.Tensor, instruction: str) -> torch.Tensor: ...

    def features(self, images: torch.Tensor) -> torch.Tensor: ...

    def edit_direction(self, images: torch.Tensor, instruction: str) -> torch.Tensor: ...


def structured_code(instruction: str) -> torch.Tensor:
    """A 14-d code of an edit-family instruction: kind (2), source colour (5), shape (2), target colour (5)."""
    edit = Edit.parse(instruction)
    code = torch.zeros(2 + 2 * len(PALETTE) + len(SHAPES))
    code[EDIT_KINDS.index(edit.kind)] = 1
    code[2 + list(PALETTE).index(edit.source)] = 1
    code[2 + len(PALETTE) + SHAPES.index(edit.shape)] = 1
    if edit.target is not None:
        code[2 + len(PALETTE) + len(SHAPES) + list(PALETTE).index(edit.target)] = 1
    return code


def instruction_embeddings(instructions: list[str], encoder: str = "minilm") -> torch.Tensor:
    """Embeddings [K, D] of ``instructions``: MiniLM sentence embeddings (384-d, offline) or, for tests and as an
    ablation without a language model, :func:`structured_code`."""
    if encoder == "minilm":
        from trustlit.interpret.encoders import encode

        return torch.from_numpy(encode(instructions, "minilm")).float()
    if encoder == "structured":
        return torch.stack([structured_code(text) for text in instructions])
    raise ValueError(f"encoder={encoder!r} is invalid, expected one of {INSTRUCTION_ENCODERS}")


def embedding_dim(encoder: str) -> int:
    return 384 if encoder == "minilm" else len(structured_code("remove the red cube"))


def edit_loss(
    predicted: torch.Tensor, before: torch.Tensor, after: torch.Tensor, change_weight: float = 10.0
) -> torch.Tensor:
    """Squared error to ``after``, pixels the edit changes (any channel by > 0.02) weighted 1 + ``change_weight``:
    an edit touches a few per cent of the pixels, and plain MSE learns the identity first."""
    changed = ((after - before).abs().amax(dim=1, keepdim=True) > 0.02).to(predicted.dtype)
    return (((predicted - after) ** 2) * (1 + change_weight * changed)).mean()


def block(in_channels: int, out_channels: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1), nn.GroupNorm(8, out_channels), nn.SiLU()
    )


class FiLMUNet(nn.Module):
    """A two-level UNet: an instruction-free encoder (``encode``) and a decoder whose blocks are modulated by
    FiLM (Perez et al. 2018: h <- (1 + γ(c)) h + β(c)) from the instruction embedding c; predicts a residual."""

    def __init__(self, condition_dim: int, channels: int = 32) -> None:
        super().__init__()
        c = channels
        self.inp, self.down1, self.down2 = block(3, c), block(c, 2 * c, 2), block(2 * c, 2 * c, 2)
        self.mid, self.up2, self.up1 = block(2 * c, 2 * c), block(4 * c, 2 * c), block(3 * c, c)
        self.out = nn.Conv2d(c, 3, 3, padding=1)
        self.film = nn.Linear(condition_dim, 2 * (2 * c + 2 * c + c))
        self.widths = (2 * c, 2 * c, c)

    def encode(self, images: torch.Tensor) -> list[torch.Tensor]:
        h1 = self.inp(images)
        h2 = self.down1(h1)
        return [h1, h2, self.down2(h2)]

    def forward(self, images: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        h1, h2, h3 = self.encode(images)
        films = self.film(condition).split([2 * w for w in self.widths], dim=-1)

        def modulate(h: torch.Tensor, film: torch.Tensor) -> torch.Tensor:
            gamma, beta = film[:, :, None, None].chunk(2, dim=1)
            return (1 + gamma) * h + beta

        h = modulate(self.mid(h3), films[0])
        h = modulate(self.up2(torch.cat([nn.functional.interpolate(h, scale_factor=2.0), h2], 1)), films[1])
        h = modulate(self.up1(torch.cat([nn.functional.interpolate(h, scale_factor=2.0), h1], 1)), films[2])
        return images + self.out(h)


class InstructionEditor(L.LightningModule):
    """STAND-IN instruction-conditioned image editor (module docstring): a :class:`FiLMUNet` of width
    ``channels`` trained by Adam (``lr``) on :func:`edit_loss` to the exact edited render. Batches:
    ``before`` [B, 3, H, W], ``after`` [B, 3, H, W], ``embedding`` [B, D] from ``encoder``; H, W divisible by 4."""

    def __init__(
        self,
        encoder: str = "minilm",
        channels: PositiveInt = 16,
        lr: PositiveFloat = 5e-3,
        change_weight: NonNegativeFloat = 10.0,
    ) -> None:
        check_arguments(InstructionEditor.__init__, locals())
        if encoder not in INSTRUCTION_ENCODERS:
            raise ValueError(f"InstructionEditor: encoder={encoder!r} is invalid, expected {INSTRUCTION_ENCODERS}")
        super().__init__()
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.net = FiLMUNet(embedding_dim(encoder), channels)
        self.embeddings: dict[str, torch.Tensor] = {}

    def embed(self, instruction: str) -> torch.Tensor:
        """The instruction's embedding [1, D] (computed once per instruction)."""
        if instruction not in self.embeddings:
            self.embeddings[instruction] = instruction_embeddings([instruction], self.hparams.encoder)
        return self.embeddings[instruction].to(self.device)

    def forward(self, images: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        return self.net(images, embeddings)

    def edit(self, images: torch.Tensor, instruction: str) -> torch.Tensor:
        with torch.no_grad():
            return self(images, self.embed(instruction).expand(len(images), -1)).clamp(0, 1)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.net.encode(images)[-1]

    def edit_direction(self, images: torch.Tensor, instruction: str) -> torch.Tensor:
        return self(images, self.embed(instruction).expand(len(images), -1)) - images

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        predicted = self(batch["before"], batch["embedding"])
        loss = edit_loss(predicted, batch["before"], batch["after"], self.hparams.change_weight)
        self.log(f"{stage}/loss", loss, batch_size=len(predicted))
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "val")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def random_view(generator: torch.Generator, radius: float = 2.7) -> Camera:
    """A camera at a uniform azimuth and a height in [1.1, 2.1] looking at the origin."""
    angle = 2 * torch.pi * float(torch.rand(1, generator=generator))
    height = 1.1 + float(torch.rand(1, generator=generator))
    position = torch.tensor([radius * torch.cos(torch.tensor(angle)), radius * torch.sin(torch.tensor(angle)), height])
    return look_at(position, torch.zeros(3), 0.9)


def edit_pairs(count: int, image_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """``count`` (before, after, instruction) renders: a random scene of 2-3 objects, a random view, a random edit."""
    generator = torch.Generator().manual_seed(seed)
    before, after, instructions = [], [], []
    for index in range(count):
        scene = procedural_scene(2 + index % 2, seed=seed * 1_000_003 + index)
        edit, camera = random_edit(scene, generator), random_view(generator)
        before.append(render(scene.gaussians, camera, image_size))
        after.append(render(apply_edit(scene, edit), camera, image_size))
        instructions.append(edit.instruction)
    return torch.stack(before).clamp(0, 1), torch.stack(after).clamp(0, 1), instructions


class EditPairsDataModule(L.LightningDataModule):
    """Generated before/after pairs of the edit family for :class:`InstructionEditor`: ``pairs`` training pairs
    and ``val_pairs`` held-out pairs (other scenes) at ``image_size``, instructions embedded by
    ``instruction_encoder`` (:func:`instruction_embeddings`)."""

    def __init__(
        self,
        pairs: PositiveInt = 2048,
        val_pairs: PositiveInt = 128,
        image_size: PositiveInt = 32,
        instruction_encoder: str = "minilm",
        batch_size: PositiveInt = 32,
        seed: NonNegativeInt = 0,
    ) -> None:
        check_arguments(EditPairsDataModule.__init__, locals())
        if instruction_encoder not in INSTRUCTION_ENCODERS:
            raise ValueError(
                f"EditPairsDataModule: instruction_encoder={instruction_encoder!r} is invalid, "
                f"expected {INSTRUCTION_ENCODERS}"
            )
        if image_size % 4:
            raise ValueError(f"EditPairsDataModule: image_size={image_size!r} is invalid, expected a multiple of 4")
        super().__init__()
        self.save_hyperparameters()
        plain_numbers(self.hparams)

    def split(self, count: int, seed: int) -> TensorDataset:
        before, after, instructions = edit_pairs(count, self.hparams.image_size, seed)
        unique = sorted(set(instructions))
        table = instruction_embeddings(unique, self.hparams.instruction_encoder)
        embeddings = table[torch.tensor([unique.index(text) for text in instructions])]
        return TensorDataset(before, after, embeddings)

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        self.train_set, self.val_set = self.split(h.pairs, 2 * h.seed), self.split(h.val_pairs, 2 * h.seed + 1)

    @staticmethod
    def collate(rows: list[tuple[torch.Tensor, ...]]) -> dict[str, torch.Tensor]:
        before, after, embedding = (torch.stack(column) for column in zip(*rows, strict=True))
        return {"before": before, "after": after, "embedding": embedding}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, self.hparams.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, self.hparams.batch_size, collate_fn=self.collate)


class InstructPix2PixEditor:
    """:class:`Editor` over a loaded diffusers ``StableDiffusionInstructPix2PixPipeline`` (weights needed; not run
    here). ``edit`` runs the pipeline; ``features`` is the VAE latent mean of the image condition; and
    ``edit_direction`` is the UNet's text guidance ε(z_t, x, c) - ε(z_t, x, ∅) at ``timestep`` on the noised latent
    of the image itself (a fixed noise draw), the quantity whose deviation DEGauss maximises."""

    def __init__(self, pipeline: Any, steps: int = 20, guidance_scale: float = 7.5, image_guidance_scale: float = 1.5,
                 timestep: int = 500, seed: int = 0) -> None:  # fmt: skip
        self.pipeline, self.steps, self.timestep, self.seed = pipeline, steps, timestep, seed
        self.guidance_scale, self.image_guidance_scale = guidance_scale, image_guidance_scale

    def edit(self, images: torch.Tensor, instruction: str) -> torch.Tensor:
        result = self.pipeline(
            prompt=[instruction] * len(images),
            image=images,
            num_inference_steps=self.steps,
            guidance_scale=self.guidance_scale,
            image_guidance_scale=self.image_guidance_scale,
            output_type="pt",
        )
        return result.images.clamp(0, 1)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.pipeline.vae.encode(2 * images - 1).latent_dist.mean

    def text_states(self, texts: list[str]) -> torch.Tensor:
        tokenizer = self.pipeline.tokenizer
        ids = tokenizer(texts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids  # fmt: skip
        return self.pipeline.text_encoder(ids.to(self.pipeline.device))[0]

    def edit_direction(self, images: torch.Tensor, instruction: str) -> torch.Tensor:
        condition = self.features(images)
        generator = torch.Generator(device=condition.device).manual_seed(self.seed)
        noise = torch.randn(condition.shape, generator=generator, device=condition.device, dtype=condition.dtype)
        timestep = torch.tensor([self.timestep], device=condition.device)
        scaled = condition * self.pipeline.vae.config.scaling_factor
        noisy = torch.cat([self.pipeline.scheduler.add_noise(scaled, noise, timestep), condition], dim=1)
        guided, empty = (self.text_states([text] * len(images)) for text in (instruction, ""))
        unet = self.pipeline.unet
        return (
            unet(noisy, timestep, encoder_hidden_states=guided).sample
            - unet(noisy, timestep, encoder_hidden_states=empty).sample
        )


def iterative_dataset_update(
    gaussians: Gaussians,
    cameras: list[Camera],
    editor: Editor,
    instruction: str,
    image_size: int,
    *,
    rounds: int = 4,
    views_per_round: int | None = None,
    fit_steps: int = 60,
    lr: float = 0.01,
) -> Gaussians:
    """The scene after ``rounds`` of instruction-driven editing with iterative dataset update (module
    docstring): each round edits the current renders of ``views_per_round`` views (all by default), replaces
    them in the dataset and refits the scene for ``fit_steps`` Adam steps. Returns the edited scene."""
    if rounds < 1 or fit_steps < 1:
        raise ValueError(f"rounds={rounds!r} and fit_steps={fit_steps!r} are invalid, expected integers >= 1")
    per_round = len(cameras) if views_per_round is None else views_per_round
    if not 1 <= per_round <= len(cameras):
        raise ValueError(f"views_per_round={views_per_round!r} is invalid, expected 1..{len(cameras)}")
    current = gaussians.detach()
    with torch.no_grad():
        dataset = render_views(current, cameras, image_size).clamp(0, 1)
    for round_index in range(rounds):
        chosen = [(round_index * per_round + k) % len(cameras) for k in range(per_round)]
        with torch.no_grad():
            renders = render_views(current, [cameras[i] for i in chosen], image_size).clamp(0, 1)
            dataset[chosen] = editor.edit(renders, instruction)
        current = fit_views(current, cameras, dataset, fit_steps, lr)
    return current


def train_editor(
    data: EditPairsDataModule, channels: int = 16, epochs: int = 30, lr: float = 5e-3, seed: int = 0
) -> InstructionEditor:
    """A stand-in :class:`InstructionEditor` trained by Adam with a cosine schedule for ``epochs`` over ``data``
    (set up here): the in-process path of the analysis module and benchmark, ``trustlit fit`` being the other."""
    torch.manual_seed(seed)
    data.setup("fit")
    editor = InstructionEditor(data.hparams.instruction_encoder, channels, lr)
    optimiser = editor.configure_optimizers()
    loader = data.train_dataloader()
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, epochs * len(loader))
    for _ in range(epochs):
        for batch in loader:
            optimiser.zero_grad()
            predicted = editor(batch["before"], batch["embedding"])
            edit_loss(predicted, batch["before"], batch["after"], editor.hparams.change_weight).backward()
            optimiser.step()
            schedule.step()
    return editor.eval()
