"""A voxel simulator for the semantic-bottleneck benchmark: a **stand-in** for fMRI, not a model of a real brain.

No fMRI data is available offline, so the benchmark decodes voxels generated here from the concept annotations of
each stimulus. The simulator encodes what the semantic-bottleneck paper (Cammarota et al., NeurIPS 2025) reports
about the weight maps, so that the decoders have the structure to find:

- a 3-D grid of ``grid`` = (X, Y, Z) voxels holds four category-selective regions, balls of radius
  ``radius`` x min(X, Y) at fixed places: ``face``, ``body``, ``place``, ``word``; every other voxel responds to no
  concept (noise and nuisance only);
- each concept k belongs to one region r(k) (:func:`concept_region` maps concept names to regions) and has its own
  pattern w_k [V], non-zero inside that region only: w_kv = g_v a_kv with g_v = exp(-d_v^2 / (2 s^2)) the region's
  profile (d_v the distance to its centre, s its radius) and a_kv the concept's *distribution* of strength
  over the region: a fraction q_k ~ U(0.1, 0.5) of the region's voxels are hot, |N(2, 0.5)|, the rest carry a
  spread-out low level u_k U(0, 1), u_k ~ U(0, 0.6). Concepts of one region thus share a location and differ in
  how their strength is distributed (the paper: "running" gives a widespread low-level pattern with a few hot
  clusters, "dancing" the same clusters alone), which is what lets a linear map tell them apart;
- the response to stimulus n is x_nv = sum_k c_nk gain_nk w_kv + nuisance s_n m_v + noise e_nv: the gain
  gain_nk ~ Gamma with mean 1 and coefficient of variation ``gain_spread`` makes a present concept change the spread
  of the voxels' responses across stimuli, not only their mean; s_n ~ N(0, 1) is a signal shared by all voxels
  (global drift, m_v ~ N(1, 0.1^2)), e_nv ~ N(0, 1) independent noise.

With ``noise = nuisance = gain_spread = 0`` the voxels are exactly linear in the concepts, x = c W.

Concept-name mapping for the text items (:mod:`trustlit.data.concepts`, names ``"<group>: <value>"``), by group:
the person (``gender``, ``birth decade``) -> ``face``; the parents' professions (``father``, ``mother``: people at
work) -> ``body``; ``born in`` (a country) -> ``place``; written things (``genre``, ``award``) -> ``word``. Other
names follow the keywords of :data:`KEYWORDS`; a name matching none goes to the region with the fewest concepts
so far.

Notes: docs/methods/semantic_bottleneck.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trustlit.neuro.semantic_bottleneck import check_concepts

REGIONS = ("face", "body", "place", "word")
CENTRES = {  # (x, y, z) as fractions of the grid: face and body close (as in ventral cortex), place and word apart
    "face": (0.3, 0.3, 0.5),
    "body": (0.3, 0.68, 0.5),
    "place": (0.72, 0.3, 0.5),
    "word": (0.72, 0.7, 0.5),
}
KEYWORDS = {  # matched against a concept's group (the name before ":"), in this order
    "body": ("father", "mother", "parent", "profession", "occupation", "job", "sport", "activity", "body"),
    "place": ("born in", "birthplace", "country", "city", "place", "nationality", "location", "continent"),
    "word": ("genre", "award", "title", "book", "language", "word", "text", "prize", "series", "novel"),
    "face": ("gender", "decade", "age", "person", "female", "male", "face"),
}


@dataclass(frozen=True)
class SimulatedVoxels:
    """What :func:`simulate_voxels` returns: ``voxels`` [N, V] float32, ``region_masks`` [R, V] bool (the ground
    truth, R = len(REGIONS)), ``patterns`` [K, V] (the concepts' true weights w_k), ``concept_regions`` [K] (region
    index of each concept), ``grid`` (X, Y, Z); voxel v sits at ``np.unravel_index(v, grid)``."""

    voxels: np.ndarray
    region_masks: np.ndarray
    patterns: np.ndarray
    concept_regions: np.ndarray
    grid: tuple[int, int, int]


def concept_region(name: str) -> str:
    """The region of a concept named ``name`` (``"<group>: <value>"`` or a bare group) by :data:`KEYWORDS`, else
    ``""``."""
    lowered = name.split(":", 1)[0].lower()
    for region, words in KEYWORDS.items():
        if any(word in lowered for word in words):
            return region
    return ""


def assign_regions(concept_names: Sequence[str]) -> np.ndarray:
    """Region index (into :data:`REGIONS`) per concept: :func:`concept_region`, unmatched names to the region with
    the fewest concepts so far (ties: the first)."""
    counts = dict.fromkeys(REGIONS, 0)
    regions = []
    for name in concept_names:
        region = concept_region(name) or min(REGIONS, key=lambda r: counts[r])
        counts[region] += 1
        regions.append(REGIONS.index(region))
    return np.array(regions, dtype=np.int64)


def region_geometry(grid: tuple[int, int, int], radius: float) -> tuple[np.ndarray, np.ndarray]:
    """``masks`` [R, V] bool and ``profiles`` [R, V] (exp(-d^2 / (2 s^2)) inside each region, 0 outside)."""
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(grid))), grid), axis=1).astype(np.float64)
    ball = radius * min(grid[0], grid[1])
    masks, profiles = [], []
    for region in REGIONS:
        centre = np.array(CENTRES[region]) * (np.array(grid) - 1)
        distance = np.linalg.norm(coords - centre, axis=1)
        inside = distance <= ball
        masks.append(inside)
        profiles.append(np.where(inside, np.exp(-(distance**2) / (2 * ball**2)), 0.0))
    return np.array(masks), np.array(profiles)


def concept_patterns(profiles: np.ndarray, concept_regions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """w_k = g_r(k) * a_k [K, V]: each concept's own hot subset and low-level spread inside its region."""
    patterns = np.zeros((len(concept_regions), profiles.shape[1]))
    for k, region in enumerate(concept_regions):
        hot = rng.random(profiles.shape[1]) < rng.uniform(0.1, 0.5)
        low = rng.uniform(0.0, 0.6) * rng.random(profiles.shape[1])
        strength = np.where(hot, np.abs(rng.normal(2.0, 0.5, profiles.shape[1])), low)
        patterns[k] = profiles[region] * strength
    return patterns


def _check_level(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} is invalid, expected a number >= 0")
    return float(value)


def simulate_voxels(
    concepts: np.ndarray,
    concept_names: Sequence[str] | None = None,
    *,
    grid: tuple[int, int, int] = (20, 20, 8),
    radius: float = 0.2,
    noise: float = 1.0,
    nuisance: float = 0.5,
    gain_spread: float = 0.3,
    seed: int = 0,
) -> SimulatedVoxels:
    """Voxel responses to stimuli with binary ``concepts`` [N, K] (module docstring); ``concept_names`` place each
    concept in a region (:func:`assign_regions`; None: concepts dealt round the regions in turn). Simulate train and
    test stimuli in one call (then split): the patterns are drawn once per call."""
    c = check_concepts(concepts)
    if len(grid) != 3 or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in grid):
        raise ValueError(f"grid={grid!r} is invalid, expected three integers >= 2 (X, Y, Z)")
    if not 0 < radius <= 0.5:
        raise ValueError(f"radius={radius!r} is invalid, expected a fraction of the grid in (0, 0.5]")
    noise, nuisance, gain_spread = (
        _check_level(v, n) for v, n in ((noise, "noise"), (nuisance, "nuisance"), (gain_spread, "gain_spread"))
    )
    if concept_names is None:
        regions = np.arange(c.shape[1]) % len(REGIONS)
    elif len(concept_names) != c.shape[1]:
        raise ValueError(f"concept_names has {len(concept_names)} names for {c.shape[1]} concept columns")
    else:
        regions = assign_regions(concept_names)
    grid = (int(grid[0]), int(grid[1]), int(grid[2]))
    masks, profiles = region_geometry(grid, radius)
    rng = np.random.default_rng(seed)
    patterns = concept_patterns(profiles, regions, rng)
    loading = rng.normal(1.0, 0.1, profiles.shape[1])
    gains = np.ones_like(c) if gain_spread == 0 else rng.gamma(1 / gain_spread**2, gain_spread**2, size=c.shape)
    voxels = (c * gains) @ patterns
    voxels += nuisance * rng.standard_normal((len(c), 1)) * loading
    voxels += noise * rng.standard_normal(voxels.shape)
    return SimulatedVoxels(voxels.astype(np.float32), masks, patterns, regions, grid)
