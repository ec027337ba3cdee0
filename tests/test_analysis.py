"""The analysis-module pattern: estimators that do not train, run by a stock Trainer's test loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO_ROOT, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

from trustlit.analysis import AnalysisModule, scalar_results


class MeanAndVariance(AnalysisModule):
    """Mean and (population) variance of every column, accumulated batch by batch."""

    def __init__(self) -> None:
        super().__init__(results_file="moments.json")
        self.rows: list[torch.Tensor] = []

    def reset(self) -> None:
        self.rows = []

    def update(self, batch) -> None:
        self.rows.append(batch[0])

    def compute(self) -> dict:
        data = self.gather(torch.cat(self.rows))
        return {"count": data.shape[0], "mean": data.mean(0), "variance": data.var(0, unbiased=False), "first": 0.5}


def loader(data: torch.Tensor, batch_size: int = 7) -> DataLoader:
    return DataLoader(TensorDataset(data), batch_size=batch_size)


def test_results_cover_every_batch_and_are_written(tmp_path):
    data = torch.arange(60, dtype=torch.float32).reshape(20, 3) ** 1.5
    module = MeanAndVariance()
    trainer = quiet_trainer(default_root_dir=tmp_path)
    (metrics,) = trainer.test(module, loader(data), verbose=False)
    written = json.loads((tmp_path / "moments.json").read_text())
    assert written["method"] == "MeanAndVariance"
    assert written["count"] == 20 == metrics["test/count"]
    torch.testing.assert_close(torch.tensor(written["mean"]), data.mean(0))
    torch.testing.assert_close(torch.tensor(written["variance"]), data.var(0, unbiased=False))
    assert metrics["test/first"] == 0.5
    assert "test/mean" not in metrics, "only scalars are logged as metrics"


def test_a_second_test_run_starts_from_nothing(tmp_path):
    module = MeanAndVariance()
    trainer = quiet_trainer(default_root_dir=tmp_path)
    trainer.test(module, loader(torch.ones(10, 2)), verbose=False)
    trainer.test(module, loader(torch.zeros(4, 2)), verbose=False)
    assert module.results["count"] == 4
    assert torch.equal(module.results["mean"], torch.zeros(2))


def test_fit_is_refused_naming_the_command(tmp_path):
    trainer = quiet_trainer(default_root_dir=tmp_path, max_steps=1)
    with pytest.raises(RuntimeError, match=r"MeanAndVariance is an analysis module.*trustlit test"):
        trainer.fit(MeanAndVariance(), loader(torch.ones(4, 2)))


def test_scalar_results_keep_numbers_only():
    results = {"a": 1, "b": torch.tensor(2.0), "c": torch.ones(3), "d": [1, 2], "e": True, "f": "text"}
    assert scalar_results(results) == {"a": 1.0, "b": 2.0}


@pytest.mark.slow
def test_ranks_gather_their_shards_under_ddp(tmp_path):
    """Two CPU processes: the results cover every row once, whatever rank saw it (tests/ddp_analysis.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    script = REPO_ROOT / "tests" / "ddp_analysis.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, env=env, cwd=tmp_path, timeout=300)
    written = json.loads((tmp_path / "rows.json").read_text())
    assert written["ids"] == list(range(21))
    assert written["gathered"] == 22, "21 rows on 2 ranks: the sampler repeats one row to give each rank 11"
    assert written["sum"] == sum(range(42))
