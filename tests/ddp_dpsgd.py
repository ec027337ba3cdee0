"""Two-process DDP (gloo, CPU) runs of DPSGD; each rank writes what it saw and its parameters.

Run by tests/test_dpsgd.py as ``python tests/ddp_dpsgd.py OUT_DIR MODE``; Lightning launches
rank 1. ``train``: 2 noisy epochs. ``exact``: one noise-free step of logistic regression with
lr 1, so the update is the clipped-gradient average that the test recomputes by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from trustlit.classifiers import MLPClassifier
from trustlit.privacy import DPSGD


class Data(L.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(48, 5, generator=generator)
        y = torch.randint(0, 3, (48,), generator=generator)
        return DataLoader(TensorDataset(x, y, torch.arange(48)), batch_size=8)


class RecordingClassifier(MLPClassifier):
    """Keeps the sample indices of every training batch it saw."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[list[int]] = []

    def per_sample_losses(self, batch):
        self.seen.append(batch[2].tolist())
        return super().per_sample_losses(batch)


def main(out: Path, mode: str) -> None:
    L.seed_everything(0)
    exact = mode == "exact"
    module = RecordingClassifier(num_features=5, num_classes=3, hidden_sizes=[] if exact else [4], lr=1.0)
    initial = [p.detach().flatten().tolist() for p in module.parameters()]
    callback = DPSGD(noise_multiplier=0.0 if exact else 1.0, max_grad_norm=0.1 if exact else 1.0, accountant="rdp")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        use_distributed_sampler=False,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **({"max_steps": 1} if exact else {"max_epochs": 2}),
    )
    trainer.fit(module, Data())
    record = {
        "params": [p.detach().flatten().tolist() for p in module.parameters()],
        "initial": initial,
        "seen": module.seen,
        "epsilon": callback.epsilon,
        "sample_rate": callback.sample_rate,
        "steps": trainer.global_step,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
