"""Purification section of ``benchmarks/attacks.py`` (``docs/benchmarks/attacks.md``).

- ``purification``: for each protection (error-minimizing noise, one-pixel shortcut, linear separable and
  autoregressive perturbations, random noise) of a seeded Fashion-MNIST subset (Debian's ``dataset-fashion-mnist``),
  the clean-test accuracy of a small CNN (:func:`trustlit.image_classifiers.fit_classifier`) trained on the
  protected release D', on D' purified by BridgePure and by the supervised denoiser (each trained on the leaked
  1 / 5 / 10 % of the release), by JPEG (q = 10), Gaussian blur, the median filter and grayscale + JPEG, and on the
  clean originals; purification seconds per image. Target (issue #15): BridgePure within 3 points of clean for every
  protection at 10 % leakage and above every baseline.

The leaks are nested: the release minus the largest leak is D' for every leak fraction, and a smaller leak is the
first pairs of the largest (one seeded permutation), so every row purifies the same images.
Every protected release, trained purifier (state dict) and accuracy is cached under
``<workdir>/purification[_quick]/<budget tag>/``; a rerun resumes. The default budget is reduced to run in about a
quarter of an hour on a shared 2-core CPU (see ``add_arguments``: release size, purifier training steps, a small
UNet, sampler steps, seeds); ``--purification-sampler-steps 40 --purification-churn 0.33`` restore the released
sampler and the other flags the paper's scale (CIFAR: 0.5K-4K pairs, 100k training steps, a 192-channel ADM UNet: a
GPU's work). The default churn is s = 0 (the deterministic ODE, the paper's setting for style mimicry): after our short
training the churn's injected noise is not removed (EM, 5 % leak, 200 images: purified-vs-clean MSE 0.064 at
s = 0.33, 0.013 at s = 0, against 0.0007 for the protected images themselves).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import cached_json, comma_list, mean_std, table

PROTECTIONS = ("error_minimizing", "one_pixel_shortcut", "linear_separable", "autoregressive", "random_noise")
CHOICES = (*PROTECTIONS, "error_minimizing_classwise")  # class-wise EM: not in the default run (see the method page)
SHORT = {"error_minimizing": "EM", "error_minimizing_classwise": "EM class-wise", "one_pixel_shortcut": "OPS",
         "linear_separable": "LSP", "autoregressive": "AR",
         "random_noise": "random"}  # fmt: skip
BASELINES = ("jpeg", "blur", "median", "grayscale_jpeg")
LEARNED = ("bridgepure", "supervised")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("purification")
    group.add_argument("--purification-protections", default=",".join(PROTECTIONS), help="comma-separated")
    group.add_argument("--purification-leaks", default="0.01,0.05,0.1", help="leaked fractions of the release")
    group.add_argument("--purification-seeds", type=int, default=1, help="seeds (the issue asks 3)")
    group.add_argument("--purification-train", type=int, default=1000, help="release size (issue: 6,000)")
    group.add_argument("--purification-size", type=int, default=14, help="image side (Fashion-MNIST: 28)")
    group.add_argument("--purification-test", type=int, default=1000, help="clean test images (issue: 2,000)")
    group.add_argument("--purification-steps", type=int, default=150, help="purifier training steps (released 100k)")
    group.add_argument("--purification-batch", type=int, default=32, help="purifier batch (released 256)")
    group.add_argument("--purification-lr", type=float, default=1e-3, help="purifier Adam lr (released 1e-4)")
    group.add_argument("--purification-unet", default="8,16", help="UNet widths per level (released ADM: 192)")
    group.add_argument("--purification-sampler-steps", type=int, default=6, help="Heun steps (released 40)")
    group.add_argument("--purification-churn", type=float, default=0.0, help="churn s (released 0.33 or 0.8)")
    group.add_argument("--purification-beta", type=float, default=0.0, help="pre-noise beta (released 0 or 0.02)")
    group.add_argument("--purification-epochs", type=int, default=5, help="classifier epochs")


def budget(args: argparse.Namespace) -> dict[str, Any]:
    sizes = {key.removeprefix("purification_"): value for key, value in vars(args).items() if key.startswith("purif")}
    sizes |= {"protections": comma_list(args.purification_protections),
              "leaks": [float(leak) for leak in comma_list(args.purification_leaks)]}  # fmt: skip
    if args.quick:
        sizes |= {"train": 200, "test": 200, "steps": 10, "sampler_steps": 3, "epochs": 1, "seeds": 1,
                  "protections": ["one_pixel_shortcut", "random_noise"], "leaks": [0.1]}  # fmt: skip
    unknown = [name for name in sizes["protections"] if name not in CHOICES]
    if unknown:
        raise ValueError(f"--purification-protections: {unknown} unknown, expected some of {', '.join(CHOICES)}")
    return sizes


def root(args: argparse.Namespace, sizes: dict[str, Any]) -> Path:
    """The cache of one budget (runs at other budgets never mix)."""
    tag = "n{train}-{size}px-t{test}-steps{steps}x{batch}-lr{lr:g}-unet{unet}-heun{sampler_steps}-s{churn:g}"
    tag += "-b{beta:g}-e{epochs}"
    return Path(args.workdir) / ("purification_quick" if args.quick else "purification") / tag.format(**sizes)


# --- stages --------------------------------------------------------------------------------------------------------


def release(protection: str, seed: int, sizes: dict[str, Any], folder: Path) -> Any:
    """The LeakedPairsDataModule at the largest leak (cached as tensors: EM's search is the slow part)."""
    from trustlit.data.leaked_pairs import LeakedPairs, LeakedPairsDataModule, ProtectedRelease

    path = folder / "release.pt"
    if path.is_file():
        saved = torch.load(path)
        return LeakedPairs(*saved["leaked"]), ProtectedRelease(**saved["release"])
    data = LeakedPairsDataModule(source="fashion_mnist", num_train=sizes["train"], num_test=sizes["test"],
                                 protection={"name": protection}, leaked_fraction=max(sizes["leaks"]),
                                 resize=None if sizes["size"] == 28 else sizes["size"], seed=seed)  # fmt: skip
    data.setup("fit")
    fields = ("protected", "clean", "labels", "test_images", "test_labels")
    payload = {"leaked": (data.leaked.clean, data.leaked.protected),
               "release": {name: getattr(data.release, name) for name in fields}}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return data.leaked, data.release


def build_learned(kind: str, sizes: dict[str, Any], seed: int) -> Any:
    from trustlit.attacks.purification import BridgePure, SupervisedDenoiser

    common = {"block_out_channels": [int(w) for w in comma_list(sizes["unet"])], "lr": sizes["lr"], "dropout": 0.0,
              "ema_decay": 0.99, "image_size": sizes["size"], "seed": seed}  # fmt: skip
    if kind == "supervised":
        return SupervisedDenoiser(**common)
    return BridgePure(**common, steps=sizes["sampler_steps"], churn_step_ratio=sizes["churn"], beta=sizes["beta"])


def train_learned(kind: str, leaked: Any, count: int, sizes: dict[str, Any], seed: int, path: Path) -> Any:
    """A BridgePure or supervised denoiser trained on the first ``count`` leaked pairs (its state dict cached)."""
    from benchmarks.common import bare_trainer
    from trustlit.data.leaked_pairs import LeakedPairs

    torch.manual_seed(seed)
    model = build_learned(kind, sizes, seed)
    if path.is_file():
        model.load_state_dict(torch.load(path))
        return model
    pairs = LeakedPairs(leaked.clean[:count], leaked.protected[:count])
    loader = torch.utils.data.DataLoader(pairs, batch_size=sizes["batch"], shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))  # fmt: skip
    bare_trainer(max_steps=sizes["steps"]).fit(model, loader)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return model


def baseline(name: str) -> Any:
    from trustlit.attacks.purification_baselines import GaussianBlur, GrayscaleJPEG, JPEGCompression, MedianFilter

    return {"jpeg": JPEGCompression(10), "blur": GaussianBlur(3, 1.0), "median": MedianFilter(3),
            "grayscale_jpeg": GrayscaleJPEG(10)}[name]  # fmt: skip


def evaluate(images: torch.Tensor, data: Any, sizes: dict[str, Any], seed: int, seconds: float = 0.0) -> dict:
    """Clean-test accuracy (%) of the CNN trained on ``images`` with D's labels, and purification s / image."""
    from trustlit.image_classifiers import accuracy, fit_classifier

    model = fit_classifier(images, data.labels, epochs=sizes["epochs"], seed=seed, num_classes=10)
    return {"accuracy": 100 * accuracy(model, data.test_images, data.test_labels), "seconds": seconds / len(images)}


def purified_row(purifier: Any, data: Any, sizes: dict[str, Any], seed: int) -> dict:
    start = time.perf_counter()
    images = purifier.purify(data.protected)
    return evaluate(images, data, sizes, seed, time.perf_counter() - start)


def protection_runs(protection: str, seed: int, sizes: dict[str, Any], base: Path) -> dict[str, dict]:
    """Every method's accuracy for one protection and seed: ``clean``, ``protected``, the baselines, and
    ``<bridgepure|supervised>@<leak>``; each cached as JSON."""
    folder = base / protection / f"seed{seed}"
    leaked, data = release(protection, seed, sizes, folder)
    runs = {
        "clean": cached_json(base / f"clean_seed{seed}.json", lambda: evaluate(data.clean, data, sizes, seed)),
        "protected": cached_json(folder / "protected.json", lambda: evaluate(data.protected, data, sizes, seed)),
    }
    for name in BASELINES:
        runs[name] = cached_json(folder / f"{name}.json", lambda: purified_row(baseline(name), data, sizes, seed))  # noqa: B023
    total = len(leaked) + len(data.labels)
    for leak in sizes["leaks"]:
        count = min(max(1, round(leak * total)), len(leaked))
        for kind in LEARNED if leak == max(sizes["leaks"]) else ("bridgepure",):  # the peer at the largest leak only

            def run() -> dict:
                model = train_learned(kind, leaked, count, sizes, seed, folder / f"{kind}_{leak:g}.pt")  # noqa: B023
                return purified_row(model, data, sizes, seed) | {"pairs": count}  # noqa: B023

            runs[f"{kind}@{leak:g}"] = cached_json(folder / f"{kind}_{leak:g}.json", run)
    return runs


# --- the section ---------------------------------------------------------------------------------------------------


def purification(args: argparse.Namespace) -> str:
    sizes = budget(args)
    base = root(args, sizes)
    seeds = range(sizes["seeds"])
    results = {p: [protection_runs(p, seed, sizes, base) for seed in seeds] for p in sizes["protections"]}
    top = max(sizes["leaks"])

    def cell(protection: str, method: str) -> str:
        return mean_std([run[method]["accuracy"] for run in results[protection]])

    methods = ["clean", "protected", f"bridgepure@{top:g}", f"supervised@{top:g}", *BASELINES]
    header = ["protection", "clean", "protected", f"BridgePure {top:.0%}", f"supervised {top:.0%}", "JPEG 10",
              "blur 3/1.0", "median 3", "gray+JPEG 10", "target met"]  # fmt: skip
    rows = []
    for protection in sizes["protections"]:
        mean = {m: sum(r[m]["accuracy"] for r in results[protection]) / len(seeds) for m in methods}
        best_baseline = max(mean[m] for m in (*BASELINES, f"supervised@{top:g}"))
        bridge = mean[f"bridgepure@{top:g}"]
        verdict = f"{'yes' if bridge >= mean['clean'] - 3 and bridge > best_baseline else 'no'} " \
                  f"(gap {mean['clean'] - bridge:+.1f}, vs best other {bridge - best_baseline:+.1f})"  # fmt: skip
        rows.append([SHORT[protection], *(cell(protection, m) for m in methods), verdict])
    leak_header = ["protection", "protected", *(f"BridgePure {leak:.0%}" for leak in sizes["leaks"]), "clean"]
    leak_rows = [[SHORT[p], cell(p, "protected"), *(cell(p, f"bridgepure@{leak:g}") for leak in sizes["leaks"]),
                  cell(p, "clean")] for p in sizes["protections"]]  # fmt: skip
    pairs = [results[sizes["protections"][0]][0][f"bridgepure@{leak:g}"]["pairs"] for leak in sizes["leaks"]]
    timing = {m: [run[m]["seconds"] for p in results for run in results[p]] for m in (f"bridgepure@{top:g}",
              f"supervised@{top:g}", *BASELINES)}  # fmt: skip
    time_rows = [[method, f"{1000 * sum(values) / len(values):.2f}"] for method, values in timing.items()]
    release_size = len(results) and sizes["train"] - pairs[-1]
    clean = sum(run["clean"]["accuracy"] for run in results[sizes["protections"][0]]) / len(seeds)
    weak = [SHORT[p] for p in results if sum(r["protected"]["accuracy"] for r in results[p]) / len(seeds) > clean - 3]
    weak_note = (
        (
            f"At this scale {', '.join(weak)} did not protect (protected accuracy within 3 points of clean): "
            "there the rows measure only what purification costs data that needs none. "
        )
        if weak
        else ""
    )
    return f"""## BridgePure purification of protected Fashion-MNIST

Scale (reduced to fit about a quarter of an hour on a shared 2-core CPU; the flags restore more): a seeded
Fashion-MNIST subset of {sizes["train"]} training images (the release) and {sizes["test"]} clean test images, resized
to {sizes["size"]} x {sizes["size"]} (area averaging) before protection,
{sizes["seeds"]} seed(s); leaked pairs {", ".join(map(str, pairs))} ({
        ", ".join(f"{leak:.0%}" for leak in sizes["leaks"])
    } of the release); D' = the other {release_size} protected images, purified and used to train the
classifier; the supervised denoiser at the largest leak only (time). Purifiers: a diffusers UNet [{
        sizes["unet"]
    }] trained {sizes["steps"]} steps, batch {sizes["batch"]},
Adam lr {sizes["lr"]:g}, EMA 0.99 (released: ADM UNet 192 channels, 100k steps, batch 256, lr 1e-4, EMA 0.9999);
BridgePure samples with {sizes["sampler_steps"]} Heun steps (released 40), churn s = {sizes["churn"]:g}, guidance
w = 0.5, pre-noise beta = {sizes["beta"]:g}. Classifier: the small CNN of `trustlit.image_classifiers`,
{sizes["epochs"]} epochs of Adam (lr 1e-3, batch 128), no augmentation. Accuracy: % on the clean test images, mean
± sd over seeds.

### Test accuracy at {top:.0%} leakage

Target (issue #15): BridgePure within 3 points of clean for every protection at 10 % leakage and above every
baseline (the paper, CIFAR-10: 92.9-94.0 vs 94.0 clean).

{table(header, rows)}

{weak_note}A purifier that is far from converged adds its own error: BridgePure's bridge is trained from scratch for
{sizes["steps"]} steps here against the released 100k, while the one-pass supervised denoiser starts at the identity
(its residual) and the filters need no training. Where the target is missed, this budget is the first suspect; the
`--purification-*` flags restore the released scale for a machine that has the time.

### BridgePure against the leaked fraction

{table(leak_header, leak_rows)}

### Purification time (ms per image, mean over protections and seeds)

Each seed's time is cached with its results, so it was measured by the run that computed that seed (its thread
count and machine load); compare methods within this table, not across runs.

{table(["method", "ms / image"], time_rows, "lr")}
"""


SECTIONS = {"purification": purification}
