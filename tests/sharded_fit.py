"""Tiny causal-LM runs on two CPU processes under the strategy fragments; each rank records its losses.

Run by tests/test_strategies.py under torchrun (``python -m torch.distributed.run --standalone
--nproc_per_node=2 tests/sharded_fit.py OUT_DIR``): the processes are started once and every
scenario below is a separate ``trustlit fit`` (Lightning reuses the gloo process group), which
saves the ~8 s import per launch. Each scenario trains 5 steps (fine-tuning: an epoch is 2
batches per rank, so the checkpoint at step 3 is mid-epoch) and writes ``OUT_DIR/<scenario>/``:
``rank{r}.json`` (per-step losses, the step reached, the model class) and, on rank 0,
``params.pt`` (the full, unsharded parameters).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trustlit.cli import run_cli

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = REPO_ROOT / "recipes" / "quickstart"
TINY = [
    "--model.init_args.lm.name_or_path=tiny-llama",
    '--model.init_args.lm.tiny={"hidden_size": 32, "num_layers": 2, "num_heads": 2}',
    "--trainer.enable_progress_bar=false",
    "--trainer.logger=false",
    "--trainer.max_steps=5",
    "--model.init_args.warmup_steps=1",
]
FICTITIOUS = ["--data.init_args.fictitious.num_authors=6", "--data.init_args.max_length=64"]
FINETUNE = [
    "-c",
    str(RECIPES / "finetune_fictitious.yaml"),
    *FICTITIOUS,
    "--trainer.limit_val_batches=1",  # a sanity batch per eval split: generate under sharding
    "--trainer.num_sanity_val_steps=1",
    "--model.init_args.max_new_tokens=8",
    "--checkpoint.every_n_train_steps=3",
    "--checkpoint.save_top_k=-1",
]
UNLEARN = [
    "-c",
    str(RECIPES / "unlearn_fictitious.yaml"),
    *FICTITIOUS,
    "--trainer.callbacks=[]",
    "--trainer.limit_val_batches=0",
]
SAFETY_DATA = [
    f"--data.init_args.{key}={value}"
    for key, value in {"num_align": 20, "num_finetune": 20, "num_harmful": 10, "num_test": 4, "batch_size": 2}.items()
]


def safety(recipe: str, *overrides: str) -> list[str]:
    """A defense's secret-keeper recipe on small sets, without its end-of-fit evaluation."""
    path = REPO_ROOT / "recipes" / "safety" / f"{recipe}_secret_keeper.yaml"
    return ["-c", str(path), *SAFETY_DATA, "--trainer.callbacks=[]", *overrides]


def scenarios(out: Path) -> dict[str, tuple[list[str], str]]:
    """Name -> (recipe and overrides, strategy fragment of configs/strategy/)."""

    def resumed(strategy: str) -> tuple[list[str], str]:
        mid_epoch = out / f"finetune_{strategy}" / "checkpoints" / "epoch=1-step=3.ckpt"
        return [*FINETUNE, f"--ckpt_path={mid_epoch}"], strategy

    grad_ascent = [*UNLEARN, "--model.class_path=trustlit.unlearning.GradAscent"]
    return {
        "finetune_ddp": (FINETUNE, "ddp"),
        "finetune_ddp_resumed": resumed("ddp"),
        "finetune_fsdp2_cpu": (FINETUNE, "fsdp2_cpu"),
        "finetune_fsdp2_cpu_resumed": resumed("fsdp2_cpu"),
        "simnpo_ddp": (UNLEARN, "ddp"),
        "simnpo_fsdp2_cpu": (UNLEARN, "fsdp2_cpu"),
        "grad_ascent_ddp": (grad_ascent, "ddp"),
        "grad_ascent_fsdp2_cpu": (grad_ascent, "fsdp2_cpu"),
        "safety_sft_ddp": (safety("sft"), "ddp"),
        "safety_lisa_ddp": (
            safety("lisa", "--model.init_args.align_steps=2", "--model.init_args.finetune_steps=2"),
            "ddp",
        ),
        "safety_vaccine_ddp": (safety("vaccine"), "ddp"),
        "safety_repnoise_ddp": (safety("repnoise"), "ddp"),
    }


class LossRecorder(L.Callback):
    """Writes each rank's per-step training losses and, at the end, the full parameters."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, pl_module) -> None:
        # a collective under FSDP2: every rank gathers, rank 0 keeps the full tensors
        params = get_model_state_dict(pl_module.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        record = {
            "losses": self.losses,
            "step": trainer.global_step,
            "model": type(pl_module.model).__name__,
            # equal on every rank when the ranks' gradients were all-reduced (DDP keeps replicas in step)
            "param_sum_squares": sum(float((p.detach().double() ** 2).sum()) for p in pl_module.model.parameters()),
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
        if trainer.global_rank == 0:
            torch.save({k: v.detach().clone() for k, v in params.items()}, self.out / "params.pt")


def fit(out: Path, args: list[str], strategy: str) -> None:
    """``args``: ``-c RECIPE`` then overrides; the strategy fragment is stacked after the recipe."""
    out.mkdir(parents=True, exist_ok=True)
    fragment = REPO_ROOT / "configs" / "strategy" / f"{strategy}.yaml"
    recorder = ["--trainer.callbacks+=sharded_fit.LossRecorder", f"--trainer.callbacks.out={out}"]
    root = [f"--trainer.default_root_dir={out}", "--trainer.devices=2"]
    run_cli(["fit", *args[:2], "-c", str(fragment), *TINY, *args[2:], *root, *recorder])


def main(out: Path, only: list[str]) -> None:
    for name, (args, strategy) in scenarios(out).items():
        if not only or name in only:
            fit(out / name, args, strategy)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
