"""Availability attacks ("unlearnable examples"): small perturbations of a training set that make a classifier
trained on it fail on clean test data, by planting a shortcut easier to learn than the real features.

Each protection is a :class:`Protection`: ``fit(images, labels)`` (the protector's search on the data to release;
a no-op for the random control) then ``protect(images, labels)``, images ``[N, C, H, W]`` in [0, 1] in and out.
``protect`` on an unfitted protection fits it on the batch first. Images may live on any device (the random
draws are made on the CPU from the protection's seeded generator; the EM surrogate trains where the images are).

- :class:`ErrorMinimizingNoise` — Huang, Ma, Erfani, Bailey, Wang, "Unlearnable Examples: Making Personal Data
  Unexploitable", ICLR 2021 (code HanxunH/Unlearnable-Examples), sample-wise min-min noise:
  ``min_theta E[ min_{||delta_i||_inf <= epsilon} L(f_theta(x_i + delta_i), y_i) ]``, alternating ``train_steps``
  SGD steps on theta with ``num_steps`` signed-gradient descent steps on every delta_i,
  ``delta <- clip_[-epsilon, epsilon](delta - step_size * sign(grad_delta L))``, until the surrogate's error on
  the perturbed data is below ``stop_error``.
- :class:`ClasswiseErrorMinimizingNoise` — the same paper's class-wise variant (released): one noise delta_k per
  class, each round ``delta_k <- clip_[-epsilon, epsilon](mean_{i: y_i = k} delta_i)`` over a batch's inner-step
  results, searched on a 20 % subset until the surrogate's error is below 0.1.
- :class:`OnePixelShortcut` — Wu, Chen, Xie, Huang, "One-Pixel Shortcut: on the Learning Preference of Deep Neural
  Networks", ICLR 2023 (code cychomatica/One-Pixel-Shotcut): per class k one pixel position sigma_k and a corner
  colour xi_k in {0, 1}^C maximising ``mean(|xi - x_sigma|) / std(|xi - x_sigma|)`` over the class's images and
  channels (each (position, colour) pair used by one class at most); that pixel of every class-k image is set to
  xi_k.
- :class:`LinearSeparablePerturbation` — Yu, Zhang, Chen, Yin, Liu, "Availability Attacks Create Shortcuts",
  KDD 2022 (code dayu11/Availability-Attacks-Create-Shortcuts), synthetic noise: per sample a point
  ``u = mu_k + A_k z`` (z ~ N(0, I); mu_k a vertex of the hypercube [-s, s]^d, s = class_sep; A_k with entries
  U(-1, 1): scikit-learn's ``make_classification`` with one cluster per class), reshaped to a coarse
  ``ceil(H/p) x ceil(W/p) x C`` grid, each cell repeated over a ``p x p`` patch, cropped to the image, and scaled to
  the L2 norm ``epsilon * sqrt(C H W)`` (the L2 ball of an L_inf budget epsilon).
- :class:`AutoregressivePerturbation` — Sandoval-Segura, Singla, Geiping, Goldblum, Goldstein, Jacobs,
  "Autoregressive Perturbations for Data Poisoning", NeurIPS 2022 (code psandovalsegura/autoregressive-poisoning):
  per class k and channel c an AR process on 3x3 windows,
  ``x[i+2, j+2] = sum_{(a, b) != (2, 2)} beta_{k,c}[a, b] x[i+a, j+b]`` (coefficients summing to 1), run from
  Gaussian noise on an image ``crop`` pixels larger, cropped, scaled to L2 norm ``epsilon`` (1.0 as released);
  the processes are found by the released greedy search (no divergence, every earlier filter responds strongly).
- :class:`RandomNoise` — the control: sample-wise ``delta ~ U[-epsilon, epsilon]``, which does not protect.

Notes: docs/methods/availability_attacks.md
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from trustlit.data.images import check_images
from trustlit.hparams import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, check_arguments
from trustlit.image_classifiers import ARCHITECTURES, Architecture, build_classifier, check_labels, predict


class Protection(ABC):
    """A protection of an image training set: ``fit`` on the data to release, then ``protect`` it.

    ``fit`` records the image shape and number of classes and runs the method's search (:meth:`search`, a no-op
    by default); ``protect`` validates its input (4-D float images in [0, 1], one int64 label each, the fitted
    shape, known classes), perturbs, clips to [0, 1] and validates the result.
    """

    name: ClassVar[str]
    needs_fit: ClassVar[bool] = True  # class-wise state (positions, processes, a surrogate) tied to the data

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.image_shape: tuple[int, int, int] | None = None
        self.num_classes: int | None = None

    @property
    def fitted(self) -> bool:
        return self.image_shape is not None

    def fit(self, images: Tensor, labels: Tensor) -> Protection:
        """Fit the protection on the training set to release; returns ``self``."""
        check_images(images, f"{self.name}: images")
        check_labels(images, labels)
        if len(labels) == 0:
            raise ValueError(f"{self.name}: images is empty, expected at least one image to fit on")
        self.image_shape, self.num_classes = tuple(images.shape[1:]), int(labels.max()) + 1
        self.search(images, labels)
        return self

    def search(self, images: Tensor, labels: Tensor) -> None:
        """The method's search on the data (none by default)."""
        return None

    def protect(self, images: Tensor, labels: Tensor) -> Tensor:
        """The protected images: same shape, values in [0, 1]."""
        check_images(images, f"{self.name}: images")
        check_labels(images, labels)
        if self.needs_fit and not self.fitted:
            self.fit(images, labels)
        if self.needs_fit and tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(
                f"{self.name}: images have shape [C, H, W] = {list(images.shape[1:])}, but the protection was "
                f"fitted on {list(self.image_shape)}"
            )
        if self.needs_fit and len(labels) and labels.max() >= self.num_classes:
            raise ValueError(
                f"{self.name}: labels hold class {labels.max().item()}, but the protection was fitted on "
                f"{self.num_classes} classes"
            )
        protected = self.perturb(images, labels).clamp(0, 1)
        check_images(protected, f"{self.name}: protected images")
        return protected

    @abstractmethod
    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        """The perturbed images (clipped to [0, 1] by :meth:`protect`)."""


class RandomNoise(Protection):
    """Sample-wise uniform noise ``delta ~ U[-epsilon, epsilon]`` (the control: it does not protect).

    Args:
        epsilon: the L_inf budget (8/255, as in the papers' random-noise baselines).
        seed: seeds the noise.
    """

    name = "random_noise"
    needs_fit = False

    def __init__(self, epsilon: PositiveFloat = 8 / 255, seed: int = 0) -> None:
        check_arguments(RandomNoise.__init__, locals())
        super().__init__(seed)
        self.epsilon = epsilon

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        noise = torch.rand(images.shape, generator=self.generator) * 2 - 1
        return images + self.epsilon * noise.to(images.device)


def min_min_step(model: torch.nn.Module, images: Tensor, labels: Tensor, delta: Tensor, step_size: float) -> Tensor:
    """One error-minimizing step on the perturbed images: ``x' <- clip_[0,1](x + delta - step_size * sign(grad))``,
    returning the new ``x' - x`` (before the epsilon projection)."""
    perturbed = (images + delta).clamp(0, 1).requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(perturbed), labels), perturbed)
    return (perturbed.detach() - step_size * grad.sign()) - images


class ErrorMinimizingNoise(Protection):
    """Sample-wise error-minimizing noise (Huang et al., ICLR 2021), the bi-level min-min of the module docstring.

    Defaults are the released sample-wise CIFAR-10 command: epsilon 8/255, step 0.8/255, 20 steps per noise
    update, 10 training steps between noise updates, stop when the surrogate's error on the perturbed data is
    below 0.01 (accuracy > 99 %), SGD (lr 0.1, momentum 0.9, weight decay 5e-4, gradient norm clipped at 5),
    batch 512, the noise started at zero, batches in data order. The released surrogate is a ResNet-18; here
    ``architecture`` (``cnn`` by default, ``resnet`` for the ResNet-18 layout) and ``max_rounds`` (the released loop
    has no bound) keep it CPU-sized.

    ``protect`` on the fitted images returns them with their noise; on other images it runs the inner
    minimisation (``num_steps`` steps from zero) against the final surrogate.
    """

    name = "error_minimizing"

    def __init__(
        self,
        epsilon: PositiveFloat = 8 / 255,
        step_size: PositiveFloat = 0.8 / 255,
        num_steps: PositiveInt = 20,
        train_steps: PositiveInt = 10,
        stop_error: NonNegativeFloat = 0.01,
        max_rounds: PositiveInt = 100,
        batch_size: PositiveInt = 512,
        lr: PositiveFloat = 0.1,
        weight_decay: NonNegativeFloat = 5e-4,
        grad_clip: PositiveFloat = 5.0,
        architecture: Architecture = "cnn",
        width: PositiveInt | None = None,
        seed: int = 0,
    ) -> None:
        check_arguments(ErrorMinimizingNoise.__init__, locals())
        if architecture not in ARCHITECTURES:
            raise ValueError(
                f"ErrorMinimizingNoise: architecture={architecture!r} is invalid, expected one of {ARCHITECTURES}"
            )
        super().__init__(seed)
        self.epsilon, self.step_size, self.num_steps = epsilon, step_size, num_steps
        self.train_steps, self.stop_error, self.max_rounds = train_steps, stop_error, max_rounds
        self.batch_size, self.lr, self.weight_decay, self.grad_clip = batch_size, lr, weight_decay, grad_clip
        self.architecture, self.width = architecture, width
        self.model: torch.nn.Module | None = None
        self.images: Tensor | None = None
        self.noise: Tensor | None = None
        self.rounds = 0
        self.train_error = 1.0

    def minimize_noise(self, images: Tensor, labels: Tensor, delta: Tensor) -> Tensor:
        """``num_steps`` projected error-minimizing steps on ``delta`` with the surrogate frozen in eval mode."""
        self.model.eval()
        for _ in range(self.num_steps):
            delta = min_min_step(self.model, images, labels, delta, self.step_size).clamp(-self.epsilon, self.epsilon)
        return delta

    def sample_noise(self, index: Tensor, labels: Tensor) -> Tensor:
        """The current noise of the samples ``index`` (their own noise; class-wise: their class's)."""
        return self.noise[index]

    def train_surrogate(
        self, images: Tensor, labels: Tensor, order: Tensor, optimizer: torch.optim.Optimizer, cursor: int
    ) -> int:
        """``train_steps`` SGD steps on consecutive batches of the perturbed samples ``order`` (cycling); the next
        cursor."""
        batches = order.split(self.batch_size)
        self.model.train()
        for step in range(self.train_steps):
            batch = batches[(cursor + step) % len(batches)]
            optimizer.zero_grad()
            perturbed = (images[batch] + self.sample_noise(batch, labels[batch])).clamp(0, 1)
            F.cross_entropy(self.model(perturbed), labels[batch]).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            optimizer.step()
        return cursor + self.train_steps

    def search(self, images: Tensor, labels: Tensor) -> None:
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.model = build_classifier(self.architecture, images.shape[1], self.num_classes, self.width)
        self.model.to(images.device)
        optimizer = torch.optim.SGD(self.model.parameters(), self.lr, momentum=0.9, weight_decay=self.weight_decay)
        self.images, self.noise = images, self.initial_noise(images)
        order = self.search_order(len(labels))
        cursor, self.rounds = 0, 0
        while self.rounds < self.max_rounds:
            cursor = self.train_surrogate(images, labels, order, optimizer, cursor)
            for batch in order.split(self.batch_size):
                self.update_noise(images[batch], labels[batch], batch)
            self.rounds += 1
            perturbed = (images[order] + self.sample_noise(order, labels[order])).clamp(0, 1)
            self.train_error = (predict(self.model, perturbed) != labels[order]).float().mean().item()
            if self.train_error < self.stop_error:
                break
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)

    def initial_noise(self, images: Tensor) -> Tensor:
        """Zero noise per sample (the released sample-wise command does not pass ``--random_start``)."""
        return torch.zeros_like(images)

    def search_order(self, count: int) -> Tensor:
        """The samples the search trains and perturbs on, in order: all of them, in data order (as released)."""
        return torch.arange(count)

    def update_noise(self, images: Tensor, labels: Tensor, index: Tensor) -> None:
        """The inner minimisation on one batch of samples ``index``."""
        self.noise[index] = self.minimize_noise(images, labels, self.noise[index])

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        if self.images is not None and images.shape == self.images.shape and torch.equal(images, self.images):
            return images + self.noise
        delta = torch.cat(
            [
                self.minimize_noise(part, part_labels, torch.zeros_like(part))
                for part, part_labels in zip(images.split(self.batch_size), labels.split(self.batch_size), strict=True)
            ]
        )
        return images + delta


class ClasswiseErrorMinimizingNoise(ErrorMinimizingNoise):
    """Class-wise error-minimizing noise (Huang et al., ICLR 2021, the class-wise variant of their released code):
    one noise ``delta_k`` per class, ``min_theta E[ min_{||delta_k||_inf <= epsilon} L(f_theta(x_i + delta_{y_i}),
    y_i) ]``. Each round trains the surrogate ``train_steps`` steps, then for every batch runs ``num_steps`` signed
    steps from ``delta_{y_i}`` on each sample and sets ``delta_k <- clip_[-eps, eps](mean_{i in batch, y_i = k}
    delta_i)``, until the surrogate's error on the perturbed search subset is below ``stop_error``.

    Defaults are the released class-wise CIFAR-10 command: epsilon 8/255, step 0.8/255, 1 step per update, 10
    training steps, stop error 0.1, the search on a random 20 % subset (``--use_subset``, ``universal_train_portion``
    0.2) in shuffled order, the noise started at ``U[-epsilon, epsilon]``, batch 512, the sample-wise class's SGD.
    The noise applies to any image of a known class.

    Args:
        num_steps, stop_error: the released class-wise values (1 and 0.1).
        search_portion: the share of the images (a seeded random subset) the search trains and perturbs on.
        kwargs: the other arguments of :class:`ErrorMinimizingNoise`, with its defaults.
    """

    name = "error_minimizing_classwise"

    def __init__(
        self,
        num_steps: PositiveInt = 1,
        stop_error: NonNegativeFloat = 0.1,
        search_portion: PositiveFloat = 0.2,
        **kwargs: Any,
    ) -> None:
        check_arguments(ClasswiseErrorMinimizingNoise.__init__, {"num_steps": num_steps, "stop_error": stop_error,
                                                                 "search_portion": search_portion})  # fmt: skip
        if search_portion > 1:
            raise ValueError(
                f"ClasswiseErrorMinimizingNoise: search_portion={search_portion} is invalid, expected a share in (0, 1]"
            )
        super().__init__(num_steps=num_steps, stop_error=stop_error, **kwargs)
        self.search_portion = search_portion

    def initial_noise(self, images: Tensor) -> Tensor:
        noise = torch.rand(self.num_classes, *images.shape[1:], generator=self.generator) * 2 - 1
        return (self.epsilon * noise).to(images.device)

    def search_order(self, count: int) -> Tensor:
        subset = max(1, round(self.search_portion * count))
        return torch.randperm(count, generator=self.generator)[:subset]

    def sample_noise(self, index: Tensor, labels: Tensor) -> Tensor:
        return self.noise[labels]

    def update_noise(self, images: Tensor, labels: Tensor, index: Tensor) -> None:
        delta = self.minimize_noise(images, labels, self.noise[labels])
        for label in labels.unique():
            self.noise[label] = delta[labels == label].mean(dim=0).clamp(-self.epsilon, self.epsilon)

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        return images + self.noise[labels.to(self.noise.device)].to(images.device)


def corner_colours(channels: int) -> Tensor:
    """The ``2^C`` corners of the colour cube, ``[2^C, C]``, channel 0 the most significant bit (as released)."""
    codes = torch.arange(2**channels)
    return ((codes[:, None] >> torch.arange(channels - 1, -1, -1)) & 1).float()


def pixel_scores(images: Tensor, colours: Tensor) -> Tensor:
    """OPS's objective for every colour and position, ``[K, H, W]``: ``mean(|xi - x|) / std(|xi - x|)`` over the
    images and channels (population std, as numpy's). A constant non-zero gap (std 0) scores +inf, the most
    stable shortcut; no gap at all scores 0."""
    gaps = (colours[:, None, :, None, None] - images[None]).abs()  # [K, N, C, H, W]
    mean = gaps.mean(dim=(1, 2))
    std = gaps.std(dim=(1, 2), correction=0)
    return torch.where(std > 0, mean / std.clamp_min(1e-12), torch.where(mean > 0, torch.inf, 0.0))


class OnePixelShortcut(Protection):
    """One-Pixel Shortcut (Wu et al., ICLR 2023): one pixel per class, the released search of the module docstring.

    ``positions`` (``[K, 2]`` rows and columns) and ``colours`` (``[K, C]``) hold the search's result. Ties
    (several +inf scores on constant backgrounds) go to the first position in row-major order.

    Args:
        seed: unused (the search is deterministic); accepted so every protection takes one.
    """

    name = "one_pixel_shortcut"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.positions: Tensor | None = None
        self.colours: Tensor | None = None

    def search(self, images: Tensor, labels: Tensor) -> None:
        _, channels, _, width = images.shape
        palette = corner_colours(channels)
        taken = torch.zeros(len(palette), *images.shape[2:], dtype=torch.bool)
        positions, colours = [], []
        for label in range(self.num_classes):
            members = images[labels == label]
            scores = pixel_scores(members, palette) if len(members) else torch.zeros(taken.shape)
            best = int(scores.masked_fill(taken, -torch.inf).flatten().argmax())
            colour, position = divmod(best, taken[0].numel())
            taken.view(len(palette), -1)[colour, position] = True
            positions.append(divmod(position, width))
            colours.append(palette[colour])
        self.positions, self.colours = torch.tensor(positions), torch.stack(colours)

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        protected = images.clone()
        labels = labels.cpu()
        rows, columns = self.positions[labels, 0], self.positions[labels, 1]
        protected[torch.arange(len(labels)), :, rows, columns] = self.colours[labels].to(images.device)
        return protected


class LinearSeparablePerturbation(Protection):
    """Synthetic linearly separable noise (Yu et al., KDD 2022), the generator of the module docstring.

    Args:
        epsilon: the L_inf size whose L2 ball bounds the noise, ``||delta||_2 = epsilon sqrt(C H W)`` (6/255 as
            released); the noise is not L_inf-bounded.
        patch_size: side of the patches each coarse coordinate is repeated over (8 as released).
        class_sep: half the side of the hypercube whose vertices are the class centres (10 as released).
        seed: seeds the centres, the per-class transforms and the per-sample draws.
    """

    name = "linear_separable"

    def __init__(
        self,
        epsilon: PositiveFloat = 6 / 255,
        patch_size: PositiveInt = 8,
        class_sep: PositiveFloat = 10.0,
        seed: int = 0,
    ) -> None:
        check_arguments(LinearSeparablePerturbation.__init__, locals())
        super().__init__(seed)
        self.epsilon, self.patch_size, self.class_sep = epsilon, patch_size, class_sep
        self.centres: Tensor | None = None
        self.transforms: Tensor | None = None

    def grid(self) -> tuple[int, int]:
        """The coarse grid's rows and columns, ``ceil(H / p)`` and ``ceil(W / p)``."""
        _, height, width = self.image_shape
        return -(-height // self.patch_size), -(-width // self.patch_size)

    def search(self, images: Tensor, labels: Tensor) -> None:
        rows, columns = self.grid()
        dimension = rows * columns * self.image_shape[0]
        if 2**dimension < self.num_classes:
            raise ValueError(
                f"linear_separable: patch_size={self.patch_size} leaves {dimension} coarse features for "
                f"{self.num_classes} classes (needs 2^features >= classes): use a smaller patch_size"
            )
        vertices: set[tuple[int, ...]] = set()
        while len(vertices) < self.num_classes:
            vertices.add(tuple(torch.randint(0, 2, (dimension,), generator=self.generator).tolist()))
        self.centres = self.class_sep * (2 * torch.tensor(sorted(vertices), dtype=torch.float32) - 1)
        self.centres = self.centres[torch.randperm(self.num_classes, generator=self.generator)]
        self.transforms = torch.rand(self.num_classes, dimension, dimension, generator=self.generator) * 2 - 1

    def noise(self, labels: Tensor) -> Tensor:
        """One synthetic noise image per label, ``[N, C, H, W]``, each of L2 norm ``epsilon sqrt(C H W)``."""
        channels, height, width = self.image_shape
        rows, columns = self.grid()
        z = torch.randn(len(labels), self.centres.shape[1], generator=self.generator)
        points = self.centres[labels] + torch.einsum("nd,nde->ne", z, self.transforms[labels])
        coarse = points.view(-1, rows, columns, channels).permute(0, 3, 1, 2)
        patches = coarse.repeat_interleave(self.patch_size, 2).repeat_interleave(self.patch_size, 3)
        patches = patches[:, :, :height, :width]
        norms = patches.flatten(1).norm(dim=1).clamp_min(1e-12)
        return patches * (self.epsilon * (channels * height * width) ** 0.5 / norms)[:, None, None, None]

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        return images + self.noise(labels.cpu()).to(images.device)


def random_ar_coefficients(channels: int, generator: torch.Generator) -> Tensor:
    """Released initialisation of a 3x3 AR process per channel, ``[C, 3, 3]``: Gaussian entries, the last
    (the predicted pixel) 0, each channel's entries normalised to sum to 1."""
    coefficients = torch.randn(channels, 3, 3, generator=generator)
    coefficients[:, 2, 2] = 0
    return coefficients / coefficients.sum(dim=(1, 2), keepdim=True)


def ar_generate(coefficients: Tensor, count: int, size: tuple[int, int], generator: torch.Generator) -> Tensor:
    """``count`` AR signals ``[count, C, H, W]`` of one process (coefficients ``[C, 3, 3]``) or of one process each
    (``[count, C, 3, 3]``): Gaussian start, then in raster order every pixel from (2, 2) on becomes the
    coefficient-weighted sum of its 3x3 window (its own, not yet updated, value has weight 0)."""
    signal = torch.randn(count, coefficients.shape[-3], *size, generator=generator)
    for i in range(size[0] - 2):
        for j in range(size[1] - 2):
            signal[:, :, i + 2, j + 2] = (signal[:, :, i : i + 3, j : j + 3] * coefficients).sum(dim=(-1, -2))
    return signal


def ar_filter_response(coefficients: Tensor, signal: Tensor) -> Tensor:
    """The released response of the process's matching filter (the coefficients with -1 at the predicted pixel,
    summing to 0) to ``signal`` ``[N, C, H, W]``: ``sum ReLU(conv(signal, filter))`` per signal."""
    kernel = coefficients.clone()
    kernel[:, 2, 2] = -1
    return F.relu(F.conv2d(signal, kernel[None])).flatten(1).sum(dim=1)


class AutoregressivePerturbation(Protection):
    """Autoregressive perturbations (Sandoval-Segura et al., NeurIPS 2022): one AR process per class, a fresh
    signal per sample, the generator and the coefficient search of the module docstring.

    Defaults follow the released CIFAR-10 setting: L2 norm 1.0, signals generated 4 pixels larger and cropped,
    and the search's thresholds: 3 trial signals of generated L2 norm <= 50 each, and every earlier filter
    responding >= 10 to the candidate's pattern. The response of a unit-norm pattern grows with the number of
    pixel values, so the threshold is ``min_response * C H W / 3072`` (10 on CIFAR's 3x32x32, as released).

    Args:
        epsilon: the L2 norm of each perturbation.
        crop: extra rows/columns generated and cropped (the AR warm-up border).
        num_trials, max_norm, min_response: the greedy search's thresholds.
        max_candidates: candidate processes drawn before the search gives up (the released default is 10^6);
            candidates are tried in batches of ``candidate_batch`` to amortise the raster loop.
        seed: seeds the search and the per-sample signals.
    """

    name = "autoregressive"

    def __init__(
        self,
        epsilon: PositiveFloat = 1.0,
        crop: NonNegativeInt = 4,
        num_trials: PositiveInt = 3,
        max_norm: PositiveFloat = 50.0,
        min_response: NonNegativeFloat = 10.0,
        max_candidates: PositiveInt = 1_000_000,
        candidate_batch: PositiveInt = 64,
        seed: int = 0,
    ) -> None:
        check_arguments(AutoregressivePerturbation.__init__, locals())
        super().__init__(seed)
        self.epsilon, self.crop, self.num_trials = epsilon, crop, num_trials
        self.max_norm, self.min_response = max_norm, min_response
        self.max_candidates, self.candidate_batch = max_candidates, candidate_batch
        self.coefficients: Tensor | None = None

    def signal_size(self) -> tuple[int, int]:
        _, height, width = self.image_shape
        return height + self.crop, width + self.crop

    def scaled(self, signal: Tensor) -> Tensor:
        """Cropped and scaled to L2 norm ``epsilon`` per sample."""
        signal = signal[:, :, self.crop :, self.crop :]
        return signal * (self.epsilon / signal.flatten(1).norm(dim=1).clamp_min(1e-12))[:, None, None, None]

    def stable_candidates(self) -> tuple[Tensor, Tensor]:
        """A batch of random processes that did not diverge, with the last trial pattern of each (unit-scaled)."""
        candidates = torch.stack(
            [random_ar_coefficients(self.image_shape[0], self.generator) for _ in range(self.candidate_batch)]
        )
        trials = ar_generate(
            candidates.repeat_interleave(self.num_trials, 0),
            len(candidates) * self.num_trials,
            self.signal_size(),
            self.generator,
        ).view(len(candidates), self.num_trials, *self.image_shape[:1], *self.signal_size())
        cropped = trials[..., self.crop :, self.crop :]
        stable = torch.isfinite(cropped).flatten(1).all(1) & (cropped.flatten(2).norm(dim=2) <= self.max_norm).all(1)
        return candidates[stable], self.scaled(trials[stable, -1])

    def search(self, images: Tensor, labels: Tensor) -> None:
        threshold = self.min_response * images[0].numel() / 3072
        found: list[Tensor] = []
        for _ in range(-(-self.max_candidates // self.candidate_batch)):
            for candidate, pattern in zip(*self.stable_candidates(), strict=True):
                responses = [ar_filter_response(other, pattern[None]).item() for other in found]
                if not responses or min(responses) >= threshold:
                    found.append(candidate)
                if len(found) == self.num_classes:
                    self.coefficients = torch.stack(found)
                    return
        raise ValueError(
            f"autoregressive: found {len(found)} of {self.num_classes} AR processes in max_candidates="
            f"{self.max_candidates} draws: raise max_candidates or lower min_response={self.min_response}"
        )

    def perturb(self, images: Tensor, labels: Tensor) -> Tensor:
        delta = torch.empty(images.shape)
        labels = labels.cpu()
        for label in labels.unique().tolist():
            members = labels == label
            signal = ar_generate(self.coefficients[label], int(members.sum()), self.signal_size(), self.generator)
            delta[members] = self.scaled(signal)
        return images + delta.to(images.device)


PROTECTIONS: dict[str, type[Protection]] = {
    protection.name: protection
    for protection in (
        ErrorMinimizingNoise,
        ClasswiseErrorMinimizingNoise,
        OnePixelShortcut,
        LinearSeparablePerturbation,
        AutoregressivePerturbation,
        RandomNoise,
    )
}


def build_protection(name: str, **kwargs: Any) -> Protection:
    """The protection registered as ``name`` in :data:`PROTECTIONS`, built with ``kwargs``."""
    if name not in PROTECTIONS:
        raise ValueError(f"protection name={name!r} is unknown, expected one of {sorted(PROTECTIONS)}")
    return PROTECTIONS[name](**kwargs)
