"""Strategy fragments (configs/strategy/), FSDP2 on CPU against DDP, sharded checkpoints, and the
strategies DPSGD and the unlearning methods refuse."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy, SingleDeviceStrategy
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from trustlit.cli import run_cli
from trustlit.privacy import DPSGD
from trustlit.unlearning import NPO, GradAscent, GradDiff, SimNPO

REPO_ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = REPO_ROOT / "configs" / "strategy"
QUICKSTART = REPO_ROOT / "recipes" / "quickstart" / "finetune_fictitious.yaml"
TINY_LM = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}}


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory) -> Path:
    """tests/sharded_fit.py under torchrun: 2 CPU processes, every scenario once (~25 s)."""
    out = tmp_path_factory.mktemp("sharded")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run([*command, str(REPO_ROOT / "tests" / "sharded_fit.py"), str(out)], check=True, env=env, cwd=out)
    return out


def ranks(run: Path) -> list[dict]:
    return [json.loads((run / f"rank{r}.json").read_text()) for r in (0, 1)]


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["finetune", "simnpo", "grad_ascent"])
def test_fsdp2_on_cpu_trains_like_ddp(two_process_runs, method):
    ddp, fsdp2 = two_process_runs / f"{method}_ddp", two_process_runs / f"{method}_fsdp2_cpu"
    for rank_ddp, rank_fsdp2 in zip(ranks(ddp), ranks(fsdp2), strict=True):
        assert rank_fsdp2["model"].startswith("FSDP"), "configure_model must shard under ModelParallelStrategy"
        assert not rank_ddp["model"].startswith("FSDP")
        assert rank_ddp["step"] == rank_fsdp2["step"] == 5
        assert rank_fsdp2["losses"] == pytest.approx(rank_ddp["losses"], abs=1e-5)
    assert ranks(fsdp2)[0]["losses"] != ranks(fsdp2)[1]["losses"], "each rank trains on its own shard of the data"
    full_ddp, full_fsdp2 = torch.load(ddp / "params.pt"), torch.load(fsdp2 / "params.pt")
    assert max_abs_diff(full_ddp, full_fsdp2) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sft", "lisa", "vaccine", "repnoise"])
def test_single_backward_safety_defenses_stay_in_step_under_ddp(two_process_runs, method):
    rank0, rank1 = ranks(two_process_runs / f"safety_{method}_ddp")
    assert rank0["step"] == rank1["step"] == 5
    assert rank0["losses"] != rank1["losses"], "each rank trains on its own shard of the data"
    assert rank0["param_sum_squares"] == pytest.approx(rank1["param_sum_squares"], rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2_cpu"])
def test_a_mid_epoch_checkpoint_on_two_processes_resumes_exactly(two_process_runs, strategy):
    run = two_process_runs / f"finetune_{strategy}"
    checkpoint = run / "checkpoints" / "epoch=1-step=3.ckpt"
    if strategy == "fsdp2_cpu":
        assert checkpoint.is_dir(), "ModelParallelStrategy writes a directory: one shard file per rank and meta.pt"
        assert len(list(checkpoint.glob("*.distcp"))) == 2
        state = torch.load(checkpoint / "meta.pt", weights_only=False)
    else:
        state = torch.load(checkpoint, weights_only=False)
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"batches_yielded": 1}], "rank 0's count"

    resumed = two_process_runs / f"finetune_{strategy}_resumed"
    for uninterrupted, again in zip(ranks(run), ranks(resumed), strict=True):
        assert again["step"] == 5
        assert again["losses"] == pytest.approx(uninterrupted["losses"][3:], abs=1e-6)
    assert max_abs_diff(torch.load(run / "params.pt"), torch.load(resumed / "params.pt")) <= 1e-6


def test_the_fsdp_fragment_wraps_decoder_layers_and_needs_a_gpu(tmp_path, monkeypatch):
    seen = {}
    original_init = FSDPStrategy.__init__

    @functools.wraps(original_init)  # the CLI reads the signature
    def recording_init(self, *args, **kwargs):
        seen.update(kwargs)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(FSDPStrategy, "__init__", recording_init)
    args = [
        "fit",
        "-c",
        str(QUICKSTART),
        "-c",
        str(STRATEGIES / "fsdp.yaml"),
        "--trainer.accelerator=cpu",
        "--trainer.devices=1",
    ]
    with pytest.raises(ValueError, match="requires a GPU"):  # Lightning's refusal: FSDP1 is GPU-only
        run_cli([*args, f"--trainer.default_root_dir={tmp_path}"])
    assert set(seen["auto_wrap_policy"]) == {LlamaDecoderLayer}
    assert str(seen["sharding_strategy"]).endswith("FULL_SHARD") and seen.get("mixed_precision") is None


def fake_trainer(strategy) -> SimpleNamespace:
    return SimpleNamespace(strategy=strategy, accumulate_grad_batches=1, gradient_clip_val=None, precision="32-true")


@pytest.mark.parametrize("strategy", [ModelParallelStrategy(), FSDPStrategy()], ids=lambda s: type(s).__name__)
def test_dpsgd_refuses_sharded_strategies_naming_them(strategy):
    with pytest.raises(ValueError, match=rf"{type(strategy).__name__}.*'SingleDeviceStrategy', 'DDPStrategy'"):
        DPSGD(noise_multiplier=1.0)._check_trainer(fake_trainer(strategy))


@pytest.mark.parametrize("method", [NPO, GradDiff, SimNPO, GradAscent], ids=lambda m: m.__name__)
def test_only_reference_free_methods_run_under_fsdp2(method):
    module = method(lm=TINY_LM)
    for strategy in (SingleDeviceStrategy(), DDPStrategy()):
        module._trainer = fake_trainer(strategy)
        module.setup("fit")
    module._trainer = fake_trainer(FSDPStrategy())
    with pytest.raises(ValueError, match="does not support the FSDPStrategy strategy"):
        module.setup("fit")
    module._trainer = fake_trainer(ModelParallelStrategy())
    if method in (SimNPO, GradAscent):
        module.setup("fit")
    else:
        with pytest.raises(ValueError, match=r"ModelParallelStrategy strategy \(it does not run sharded.*supported"):
            module.setup("fit")
