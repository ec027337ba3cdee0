"""Two-process DDP (gloo, CPU) run of an analysis module under ``Trainer.test``; rank 0 writes the results.

Run by tests/test_analysis.py as ``python tests/ddp_analysis.py OUT_DIR``; Lightning launches rank 1.
The 21 rows do not split evenly, so the ranks gather shards of different sizes (the distributed
sampler pads one rank with a repeated row, which the module drops by its row id).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from trustlit.analysis import AnalysisModule

ROWS = 21


class RowsSeen(AnalysisModule):
    """The ids and values of every row seen, over all ranks."""

    def __init__(self) -> None:
        super().__init__(results_file="rows.json")
        self.parts: list[torch.Tensor] = []

    def reset(self) -> None:
        self.parts = []

    def update(self, batch) -> None:
        values, ids = batch
        self.parts.append(torch.cat([ids[:, None].float(), values], dim=1))

    def compute(self) -> dict:
        rows = self.gather(torch.cat(self.parts))
        unique = {int(row[0]): row[1:].tolist() for row in rows}
        return {"gathered": rows.shape[0], "ids": sorted(unique), "sum": sum(sum(v) for v in unique.values())}


def main(out: Path) -> None:
    values = torch.arange(ROWS * 2, dtype=torch.float32).reshape(ROWS, 2)
    data = DataLoader(TensorDataset(values, torch.arange(ROWS)), batch_size=4)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
    )
    trainer.test(RowsSeen(), data, verbose=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
