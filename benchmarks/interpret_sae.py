"""Sparse-autoencoder sections of ``benchmarks/interpret.py`` (``docs/benchmarks/interpret.md``).

- ``sae-synthetic``: every variant (:mod:`trustlit.interpret.sae`) and overcomplete's ``MpSAE`` on the
  synthetic hierarchy (:class:`trustlit.data.HierarchicalFeaturesDataModule`), k in {8, 16, 32, 64}:
  validation FVU, L0, dead fraction, ground-truth recovery (mean over the true features of the best
  cosine to an atom) and training throughput (tokens/s).
- ``sae-smollm2``: the same on SmolLM2-135M-Instruct's layer-15 residual stream over TOFU question +
  answer text (harvested once with ``recipes/interpret/harvest_smollm2.yaml`` under
  ``<workdir>/sae/``), without recovery (no ground truth).

Every model trains in the same plain loop on the same batches (the Lightning module's own
``training_forward``, loss, parallel-gradient removal and renormalisation; no logging), so tokens/s
compares the methods, not the harness. ReLU and JumpReLU have no k: their sparsity coefficient is
steered during training towards L0 = k (multiplicative updates, ``SparsityController``) and the table
reports the L0 they reach; JumpReLU's thresholds start at the (1 - k/n) quantile of the first batch's
pre-activations (under Adam, log theta moves by about lr per step: from the paper's 0.001 it cannot
reach L0 ~ k in a few hundred steps). The peer, overcomplete's ``MpSAE`` (KempnerInstitute/overcomplete), trains with
the criterion of its documentation (mean-squared error minus 0.01 times the revive term), the same
Adam, lr, batches and steps; it has no pre-bias. It is imported from ``--sae-peers`` (a directory
holding ``overcomplete`` and ``einops``, installed with ``pip install --no-deps --target DIR overcomplete
einops``; its ``__init__`` imports torchvision models, so only its ``sae`` subpackage is loaded).
Results are cached per run under ``<workdir>/sae/`` (JSON), so a rerun resumes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import REPO_ROOT, TOFU, table

KS = (8, 16, 32, 64)
VARIANTS = ("MatchingPursuitSAE", "TopKSAE", "BatchTopKSAE", "ReLUSAE", "JumpReLUSAE")
PEER = "overcomplete MpSAE"
HARVEST_RECIPE = REPO_ROOT / "recipes" / "interpret" / "harvest_smollm2.yaml"
# starting sparsity coefficients of the L0 controller (inputs scaled to E||x|| = sqrt(d))
START_COEFFICIENT = {"ReLUSAE": 0.05, "JumpReLUSAE": 0.05}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sae-steps", type=int, help="training steps per model (default: synthetic 300, smollm2 150)")
    parser.add_argument("--sae-batch-size", type=int, default=256, help="tokens per step (default 256)")
    parser.add_argument("--sae-latents", type=int, help="atoms (default: synthetic 512, smollm2 1024)")
    parser.add_argument("--sae-peer-max-k", type=int, default=64, help="largest k the peer runs at (default 64)")
    parser.add_argument("--sae-lr", type=float, default=1e-3, help="Adam lr of every model (default 1e-3)")
    parser.add_argument("--sae-ks", default="8,16,32,64", help="k values (default 8,16,32,64)")
    parser.add_argument(
        "--sae-peers",
        type=Path,
        default=REPO_ROOT / ".peers",
        help="directory holding overcomplete and einops (default: .peers, made by `make bench-peers`)",
    )
    parser.add_argument("--sae-val-tokens", type=int, default=8192, help="validation tokens (default 8192)")


# -- the peer ----------------------------------------------------------------------------------


def import_overcomplete_mp(peers: Path) -> type:
    """overcomplete's ``MpSAE`` from ``peers``, loading its ``sae`` subpackage without the package's
    ``__init__`` (which imports torchvision models)."""
    if "overcomplete.sae" in sys.modules:
        return sys.modules["overcomplete.sae"].MpSAE
    if str(peers) not in sys.path:
        sys.path.insert(0, str(peers))
    spec = importlib.util.find_spec("overcomplete")
    if spec is None or spec.submodule_search_locations is None:
        raise FileNotFoundError(f"overcomplete is not in {peers}: run make bench-peers, or pass --sae-peers DIR")
    if "overcomplete" not in sys.modules:
        package = types.ModuleType("overcomplete")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["overcomplete"] = package
    from overcomplete.sae import MpSAE

    return MpSAE


def overcomplete_criterion(
    x: torch.Tensor, x_hat: torch.Tensor, residual: torch.Tensor, z: torch.Tensor, d: torch.Tensor
):
    """The training criterion of overcomplete's MP-SAE documentation (docs/saes/mp.md)."""
    loss = (x - x_hat).square().mean()
    revive = (z.amax(dim=0) < 1e-2).detach()
    if revive.sum() > 10:
        loss = loss - 1e-2 * (residual @ d.T)[:, revive].mean()
    return loss


class PeerMP:
    """overcomplete's MpSAE behind the interface of the training loop below."""

    def __init__(self, cls: type, d_in: int, n_latents: int, k: int, lr: float, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = cls(d_in, n_latents, k=k)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        residual, z = self.model.encode(x)
        x_hat = self.model.decode(z)
        loss = overcomplete_criterion(x, x_hat, residual, z, self.model.get_dictionary())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return z

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.eval()
        _, z = self.model.encode(x)
        return z, self.model.decode(z)

    def dictionary(self) -> torch.Tensor:
        return self.model.get_dictionary().detach()


# -- ours ----------------------------------------------------------------------------------------


class SparsityController:
    """Steers a ReLU / JumpReLU ``sparsity_coefficient`` towards a target L0: after each step,
    lambda <- lambda * exp(rate * clamp(log(L0 / target), -1, 1))."""

    def __init__(self, target: float, rate: float = 0.03) -> None:
        self.target, self.rate = target, rate

    def update(self, sae: Any, l0: float) -> None:
        error = max(-1.0, min(1.0, math.log(max(l0, 1e-3) / self.target)))
        sae.sparsity_coefficient *= math.exp(self.rate * error)


class Ours:
    """A trustlit SAE trained exactly as its LightningModule trains, without the Trainer."""

    def __init__(self, name: str, d_in: int, n_latents: int, k: int, lr: float, seed: int, dead_window: int) -> None:
        from trustlit.interpret import sae as package

        cls = getattr(package, name)
        common = {"lr": lr, "seed": seed, "dead_window_tokens": dead_window}
        if name in START_COEFFICIENT:
            key = "l1_coefficient" if name == "ReLUSAE" else "l0_coefficient"
            self.sae = cls(d_in, n_latents, **{key: START_COEFFICIENT[name]}, **common)
            self.controller: SparsityController | None = SparsityController(k)
        else:
            self.sae = cls(d_in, n_latents, k=k, **common)
            self.controller = None
        self.optimizer = self.sae.configure_optimizers()

    def step(self, x: torch.Tensor) -> torch.Tensor:
        sae = self.sae
        if not bool(sae.b_pre_initialised) and self.controller is not None and hasattr(sae, "log_threshold"):
            self.initialise_thresholds(x)
        sae.initialise_b_pre(x)
        codes, x_hat, terms = sae.training_forward(x)
        loss = (x - x_hat).square().sum(dim=-1).mean() + sum(terms.values(), torch.zeros(()))
        sae.track_firing(codes)
        self.optimizer.zero_grad()
        loss.backward()
        sae.on_before_optimizer_step(self.optimizer)
        self.optimizer.step()
        sae.normalize_dictionary()
        if self.controller is not None:
            self.controller.update(sae, float((codes != 0).sum(-1).float().mean()))
        return codes

    @torch.no_grad()
    def initialise_thresholds(self, x: torch.Tensor) -> None:
        """JumpReLU's theta at the (1 - k / n) quantile of the first batch's pre-activations: under Adam,
        log theta moves by about lr per step, so from the paper's 0.001 it cannot reach L0 ~ k in a short run."""
        sae = self.sae
        sae.initialise_b_pre(x)
        h = sae.pre_activations(x).flatten()
        quantile = h.kthvalue(int(len(h) * (1 - self.controller.target / sae.n_latents))).values
        sae.log_threshold.fill_(math.log(max(float(quantile), 1e-3)))

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.sae.eval()
        z = self.sae.encode(x)
        return z, self.sae.decode(z)

    def dictionary(self) -> torch.Tensor:
        return self.sae.dictionary.detach()


# -- one run -------------------------------------------------------------------------------------


def train_and_score(
    model: Ours | PeerMP, train: torch.Tensor, val: torch.Tensor, steps: int, batch: int, features: torch.Tensor | None
) -> dict[str, float]:
    from trustlit.interpret.sae.metrics import feature_recovery, fvu

    began = time.perf_counter()
    for step in range(steps):
        start = (step * batch) % (len(train) - batch + 1)
        model.step(train[start : start + batch])
    seconds = time.perf_counter() - began
    z, x_hat = model.evaluate(val)
    result = {
        "fvu": float(fvu(val, x_hat)),
        "l0": float((z != 0).sum(-1).float().mean()),
        "dead": float((~(z != 0).any(dim=0)).float().mean()),
        "tokens_per_s": steps * batch / seconds,
    }
    if features is not None:
        result["recovery"] = float(feature_recovery(model.dictionary(), features))
    return result


def cached_run(cache: Path, build: Callable[[], Ours | PeerMP], run: Callable[[Any], dict[str, float]]) -> dict:
    if cache.is_file():
        return json.loads(cache.read_text())
    result = run(build())
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result))
    return result


def sweep(
    args: argparse.Namespace,
    tag: str,
    train: torch.Tensor,
    val: torch.Tensor,
    features: torch.Tensor | None,
    steps: int,
    latents: int,
):
    """{(method, k): scores} for every variant, the peer (up to ``--sae-peer-max-k``), and k."""
    ks = [int(k) for k in args.sae_ks.split(",")] if not args.quick else [8, 32]
    batch, lr = args.sae_batch_size, args.sae_lr
    d_in = train.shape[-1]
    root = args.workdir / "sae" / f"{tag}{'_quick' if args.quick else ''}" / f"n{latents}_b{batch}_s{steps}_lr{lr}"
    peer = import_overcomplete_mp(args.sae_peers)
    results = {}
    for k in ks:
        for name in (*VARIANTS, PEER):
            if name == PEER and k > args.sae_peer_max_k:
                continue

            def build(name=name, k=k):
                if name == PEER:
                    return PeerMP(peer, d_in, latents, k, lr, seed=0)
                return Ours(name, d_in, latents, k, lr, seed=0, dead_window=25 * batch)

            cache = root / f"{name.replace(' ', '_')}_k{k}.json"
            score = lambda model: train_and_score(model, train, val, steps, batch, features)  # noqa: E731
            results[name, k] = cached_run(cache, build, score)
            print(f"  {tag} k={k} {name}: {results[name, k]}", flush=True)
    return results, ks


def render(results: dict, ks: list[int], with_recovery: bool) -> str:
    header = ["k", "method", "FVU", "L0", "dead", *(["recovery"] if with_recovery else []), "tokens/s"]
    rows = []
    for k in ks:
        for name in (*VARIANTS, PEER):
            if (name, k) not in results:
                continue
            r = results[name, k]
            cells = [str(k), name, f"{r['fvu']:.4f}", f"{r['l0']:.1f}", f"{r['dead']:.3f}"]
            cells += [f"{r['recovery']:.3f}"] if with_recovery else []
            rows.append([*cells, f"{r['tokens_per_s']:,.0f}"])
    return table(header, rows, align="rl" + "r" * (len(header) - 2))


def summary(results: dict, ks: list[int]) -> str:
    """One sentence on the targets, from the measurements."""
    compared = [k for k in ks if (PEER, k) in results]
    wins = [k for k in compared if results["MatchingPursuitSAE", k]["fvu"] <= results[PEER, k]["fvu"]]
    ratios = [results["MatchingPursuitSAE", k]["tokens_per_s"] / results[PEER, k]["tokens_per_s"] for k in compared]
    losses = [k for k in ks if results["MatchingPursuitSAE", k]["fvu"] > results["TopKSAE", k]["fvu"]]
    return (
        f"MP-SAE's FVU is at most the peer's at {len(wins)} of {len(compared)} k "
        f"({', '.join(map(str, wins)) or 'none'}); "
        f"its throughput is {min(ratios):.1f}x to {max(ratios):.1f}x the peer's. "
        + (
            f"MP-SAE loses to TopK at k = {', '.join(map(str, losses))}."
            if losses
            else "MP-SAE's FVU is below TopK's at every k here."
        )
    )


CAVEATS = """Reading the table: throughputs were measured one run after another on a 2-core machine shared with other
jobs (load average ~10), so they drift by 2-3x between runs; the ours / peer ratios compare runs minutes
apart, not simultaneous ones. ReLU and JumpReLU did not settle at L0 = k within the run (their L0 column
is what they reached: the controller overshoots, JumpReLU's thresholds overshoot downwards in L0), so
their rows are not at equal L0. BatchTopK validates with its inference threshold, an average of the
smallest kept activation that lags in a short run, hence L0 < k. MP-SAE's L0 is slightly below k where
it picks an atom twice. A low FVU at large k is partly fitted noise (recovery falls with k for every
method; SynthSAEBench, arXiv 2602.14687, reports that MP-SAE exploits superposition noise this way).
Each run is cached under `<workdir>/sae/`: when a block is re-rendered from the cache, its date and load
average above are those of the rendering, not of the measurements."""


def versus_peer(results: dict, ks: list[int]) -> str:
    rows = []
    for k in ks:
        ours, peer, topk = results["MatchingPursuitSAE", k], results.get((PEER, k)), results["TopKSAE", k]
        rows.append(
            [
                str(k),
                f"{ours['fvu']:.4f}",
                f"{peer['fvu']:.4f}" if peer else "not run",
                ("yes" if ours["fvu"] <= peer["fvu"] else "**no**") if peer else "-",
                f"{ours['tokens_per_s'] / peer['tokens_per_s']:.1f}x" if peer else "-",
                f"{topk['fvu']:.4f}",
                "MP-SAE" if ours["fvu"] <= topk["fvu"] else "TopK",
            ]
        )
    header = ["k", "MP-SAE FVU", "peer MP FVU", "ours <= peer", "throughput ours / peer", "TopK FVU", "better"]
    return table(header, rows, align="rrrlrrl")


# -- sae-synthetic -------------------------------------------------------------------------------


def sae_synthetic(args: argparse.Namespace) -> str:
    from trustlit.data.hierarchy import HierarchicalFeaturesDataModule

    sizes = {"dim": 64, "num_parents": 32, "children_per_parent": 4, "parents_per_sample": 3, "noise_std": 0.05}
    data = HierarchicalFeaturesDataModule(**sizes, num_train=65536, num_val=args.sae_val_tokens, seed=0)
    steps, latents = (args.sae_steps or 300) if not args.quick else 30, args.sae_latents or 512
    results, ks = sweep(args, "synthetic", data.train_x, data.val_x, data.features, steps, latents)
    return f"""## Sparse autoencoders on synthetic hierarchical features

Data: `HierarchicalFeaturesDataModule` (trustlit/data/hierarchy.py): {sizes["num_parents"]} parents x
{sizes["children_per_parent"]} children in {sizes["dim"]} dimensions (child-parent cosine 0.5; children
conditionally orthogonal within their parent), {sizes["parents_per_sample"]} parents (each with one child) per
sample, so the true L0 is {2 * sizes["parents_per_sample"]}; noise norm ~{sizes["noise_std"]}; 65,536 training
and {args.sae_val_tokens} validation samples. Every model: {latents} atoms, {steps} Adam steps
(lr {args.sae_lr}) of {args.sae_batch_size} samples, the same batches; metrics on the validation set.
FVU = sum ||x - x_hat||^2 / sum ||x - mean x||^2; L0 = non-zeros per sample (MP-SAE may pick an atom
twice, so L0 <= k; BatchTopK validates with its threshold; ReLU and JumpReLU are steered to L0 = k
during training); dead = share of atoms that never fire on the validation set; recovery = mean over
the {len(data.features)} true features of the largest cosine to an atom; tokens/s = training only,
one process, {args.threads} thread(s), on a shared 2-core CPU (compare within a row group, not across
machines).

{render(results, ks, with_recovery=True)}

MP-SAE against the peer implementation (overcomplete's `MpSAE`, same data, k, steps) and against TopK:

{versus_peer(results, ks)}

{summary(results, ks)}

{CAVEATS}
"""


# -- sae-smollm2 ---------------------------------------------------------------------------------


def harvest_smollm2(args: argparse.Namespace) -> Path:
    """The layer-15 harvest on TOFU question + answer text (the recipe), cached under the workdir."""
    root = args.workdir / "sae" / "harvest_smollm2_tofu"
    if not (root / "activations" / "index.json").is_file():
        from trustlit.cli import main

        main(
            [
                "predict",
                "-c",
                str(HARVEST_RECIPE),
                f"--data.init_args.source={TOFU}",
                "--trainer.accelerator=cpu",
                "--trainer.enable_progress_bar=false",
                f"--trainer.default_root_dir={root}",
            ]
        )
    return root / "activations"


def activation_rows(dataset: Any, limit: int | None) -> tuple[torch.Tensor, int]:
    """The rows of an ActivationRows dataset in order (at most ``limit``), without each sample's first token
    (its state is the attention sink: norm ~140x the others, identical in every sample); and how many were dropped."""
    count = len(dataset) if limit is None else min(limit * 2, len(dataset))
    parts, dropped = [], 0
    for start in range(0, count, 8192):
        batch = dataset.__getitems__(list(range(start, min(start + 8192, count))))
        keep = batch["token_position"] > 0
        dropped += int((~keep).sum())
        parts.append(batch["activations"][keep])
    rows = torch.cat(parts)
    return (rows if limit is None else rows[:limit]), dropped


def sae_smollm2(args: argparse.Namespace) -> str:
    from trustlit.data.activations import ActivationDataModule

    path = harvest_smollm2(args)
    data = ActivationDataModule(str(path), layer=15, site="residual", val_fraction=0.1, seed=0)
    data.setup("fit")
    steps, latents = (args.sae_steps or 150) if not args.quick else 30, args.sae_latents or 1024
    train_needed = steps * args.sae_batch_size
    order = torch.randperm(len(data.train_dataset), generator=torch.Generator().manual_seed(0))
    data.train_dataset.rows = data.train_dataset.rows[order.numpy()]  # a shuffled subset, read once
    train, dropped = activation_rows(data.train_dataset, train_needed)
    val, _ = activation_rows(data.val_dataset, args.sae_val_tokens)
    scale = math.sqrt(train.shape[-1]) / float(train.norm(dim=-1).mean())
    train, val = train * scale, val * scale
    results, ks = sweep(args, "smollm2", train, val, None, steps, latents)
    total = data.index["total_rows"]
    note = f" ({data.index['note']})" if "note" in data.index else ""
    return f"""## Sparse autoencoders on SmolLM2-135M-Instruct, layer 15

Data: the residual stream after decoder layer 15 (of 30) of `smollm2-135m-instruct`, harvested with
`recipes/interpret/harvest_smollm2.yaml` (HarvestActivations, float32) on the TOFU forget10 + retain90
question + answer text (plain "Question: ... Answer: ..." prompts, no chat template): {total:,} tokens
of {data.index["num_samples"]} samples{note}. Train/val split by sample (10% val). Each sample's first token is
left out (its state is the attention sink, norm ~140x the others and the same in every sample: it
would dominate the variance; {dropped} such rows fell in the training subset read). Activations are
multiplied by one constant ({scale:.4f}) so that E||x|| = sqrt(576), the scale the papers' default
coefficients assume (FVU does not depend on it). Every model: {latents} atoms, {steps} Adam steps
(lr {args.sae_lr}) of {args.sae_batch_size} tokens ({train_needed:,} training tokens, one pass over a shuffled
subset), the same batches; metrics on {len(val):,} validation tokens. Columns as in the synthetic section.
Reduced scale for a shared 2-core CPU: the papers train 10^8–10^9 tokens with 16k+ atoms; the absolute
FVUs here are those of short runs.

{render(results, ks, with_recovery=False)}

MP-SAE against the peer implementation (overcomplete's `MpSAE`, same data, k, steps) and against TopK:

{versus_peer(results, ks)}

{summary(results, ks)} (A public replication, EleutherAI's "Matching pursuit SAEs" on SmolLM2 layers
10-20, found MP worse than TopK at small k; at this run's scale the comparison above is what we measured.)

{CAVEATS.replace("; SynthSAEBench", " on the synthetic data; SynthSAEBench")}
"""


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"sae-synthetic": sae_synthetic, "sae-smollm2": sae_smollm2}
