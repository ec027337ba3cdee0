"""Two-process DDP (gloo, CPU) run of DPSGD; each rank writes its parameters and epsilon.

Run by tests/test_dpsgd.py as ``python tests/ddp_dpsgd.py OUT_DIR``; Lightning launches rank 1.
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


def main(out: Path) -> None:
    L.seed_everything(0)
    module = MLPClassifier(num_features=5, num_classes=3, hidden_sizes=[4], lr=0.5)
    initial = [p.detach().flatten().tolist() for p in module.parameters()]
    callback = DPSGD(noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=2,
        use_distributed_sampler=False,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, Data())
    record = {
        "params": [p.detach().flatten().tolist() for p in module.parameters()],
        "initial": initial,
        "epsilon": callback.epsilon,
        "sample_rate": callback.sample_rate,
        "steps": trainer.global_step,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
