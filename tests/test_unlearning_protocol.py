"""The TOFU protocol's driver (benchmarks/unlearning_protocol.py): selection at matched utility, model names,
the guard against recomputing a fine-tune on another kind of CPU, and a smoke run of the sweep and the seeds."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this repository's benchmarks package, not the one opacus installs
from benchmarks import unlearning_protocol as protocol_module  # noqa: E402
from benchmarks.common import bare_trainer  # noqa: E402
from benchmarks.unlearning import parse_args  # noqa: E402
from benchmarks.unlearning_protocol import (  # noqa: E402
    ANSWER_CHARS,
    Progress,
    Protocol,
    cached_state,
    chain_title,
    degenerate,
    finetune_row,
    made_on_kinds,
    mean_std_of,
    render_methods,
    render_pending,
    run_order,
    run_protocol,
    select,
    setting_name,
    step_losses,
    sweep,
)
from trustlit import CausalLMFineTuning  # noqa: E402
from trustlit.checkpointing import read_checkpoint  # noqa: E402
from trustlit.stages import config_digest  # noqa: E402


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """The protocol sets torch's thread count from ``--threads``: give the next tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def quick_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    """A ``--quick`` run (tiny model, 1 epoch, 8 records per split) in ``tmp_path``, its report and scatter there too
    (the default ``--output`` would overwrite the committed doc's FQ-MU scatter with the tiny model's points)."""
    places = ["--workdir", str(tmp_path / "work"), "--records", str(tmp_path / "rec")]
    places += ["--output", str(tmp_path / "unlearning.md")]
    return parse_args(["--sections", "protocol", "--quick", *places, *extra])


def run(fq: float, mu: float) -> dict[str, float]:
    return {"forget_quality": fq, "model_utility": mu}


def test_select_takes_the_highest_forget_quality_among_settings_at_matched_utility():
    sweep = {"a": run(0.9, 0.50), "b": run(0.4, 0.96), "c": run(0.3, 0.99), "d": run(0.4, 0.97)}
    # threshold 0.95 x 1.0: "a" (the best FQ) is not eligible; "b" and "d" tie on FQ, "d" has the higher MU
    assert select(sweep, 1.0) == ("d", True)


def test_select_without_an_eligible_setting_takes_the_highest_utility_and_flags_it():
    sweep = {"a": run(0.9, 0.50), "b": run(0.1, 0.80)}
    assert select(sweep, 1.0) == ("b", False)


def test_a_setting_exactly_at_the_threshold_is_eligible():
    assert select({"a": run(0.2, 0.95), "b": run(0.1, 0.99)}, 1.0) == ("a", True)


def test_only_the_methods_that_unlearn_through_adapters_sweep_the_lora_grid():
    lrs = {
        (method, variant): [s["lr"] for s in sweep(method, variant)]
        for method in ("NPO", "SimNPO", "LUNAR", "RMU")
        for variant in ("full", "lora")
    }
    assert lrs["NPO", "full"] == [1e-5, 3e-5, 1e-4]
    assert lrs["NPO", "lora"] == [1e-4, 3e-4, 1e-3]
    assert sorted(set(lrs["SimNPO", "lora"])) == [1e-4, 3e-4, 1e-3] and len(lrs["SimNPO", "lora"]) == 18
    assert lrs["RMU", "lora"] == lrs["RMU", "full"] == [1e-5, 3e-5, 1e-4]  # its own parameters, no adapters
    assert lrs["LUNAR", "lora"] == lrs["LUNAR", "full"] == [3e-3, 1e-2, 3e-2]


def test_a_sweep_runs_its_highest_learning_rate_first_in_the_grids_order():
    settings = sweep("SimNPO", "lora")
    order = run_order(settings)
    assert sorted(map(setting_name, order)) == sorted(map(setting_name, settings))
    assert [s["lr"] for s in order] == [1e-3] * 6 + [3e-4] * 6 + [1e-4] * 6
    assert [(s["beta"], s["gamma"]) for s in order[:6]] == [(s["beta"], s["gamma"]) for s in settings[:6]]


def test_lora_fine_tunes_train_tofu_lora_epochs_and_are_named_by_them(tmp_path: Path):
    args = parse_args(["--sections", "protocol", "--workdir", str(tmp_path / "w"), "--records", str(tmp_path / "r")])
    protocol = Protocol(args)
    assert protocol.model("target", "full") == f"target-full-lr{args.finetune_lr:g}"
    assert protocol.model("retain", "lora") == f"retain-lora-lr{args.finetune_lr_lora:g}-ep10"
    assert protocol.finetune_epochs("lora") == 10 and protocol.finetune_epochs("full") == 5


def test_the_unlearning_batches_follow_the_run_seed(tmp_path: Path):
    protocol = Protocol(quick_args(tmp_path))
    source = protocol.data()
    assert [protocol.forget_retain_data(source, seed).seed for seed in (1, 2)] == [1, 2]


OTHER_CPU = "Other CPU Model 9000, 2 cores (2 available to the process), CPU only"


def say_made_on(protocol: Protocol, name: str, machine_text: str) -> None:
    """Let stage ``name``'s committed record say ``machine_text`` made it, and drop this checkout's files of it."""
    path = protocol.cache.record_directory(name) / "stage.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "machine": machine_text}))
    (protocol.cache.path(name) / "stage.json").unlink()


def target_made_on_another_cpu(tmp_path: Path, *extra: str) -> tuple[Protocol, str]:
    """A quick run's fine-tuned target whose committed record says another kind of CPU made it, and whose files
    this checkout lacks."""
    protocol = Protocol(quick_args(tmp_path, "--phase", "gate", *extra))
    protocol.finetune("target", "full")
    name = protocol.stage("finetune", "target", "full")
    say_made_on(protocol, name, OTHER_CPU)
    return protocol, name


def target_recorded_on(tmp_path: Path, machine_text: str) -> tuple[Protocol, str]:
    """The record of a quick run's target fine-tune, written without training, that says ``machine_text`` made it;
    this checkout lacks its files."""
    protocol = Protocol(quick_args(tmp_path, "--phase", "gate"))
    protocol.data()  # the configuration names the data stage's digest
    name = protocol.stage("finetune", "target", "full")
    protocol.cache.run(name, protocol.finetune_config("target", "full"), lambda directory: {"weights_sha256": "ab12"})
    say_made_on(protocol, name, machine_text)
    return protocol, name


def test_recomputing_a_fine_tune_made_on_another_cpu_stops_before_it_starts(tmp_path: Path):
    protocol, name = target_recorded_on(tmp_path, OTHER_CPU)
    with pytest.raises(SystemExit, match=f"{name}: .*made on Other CPU Model 9000.*--other-cpu"):
        protocol.finetune("target", "full", files=True)
    assert not protocol.cache.has_files(name, protocol.finetune_config("target", "full"))


def test_other_cpu_recomputes_it_and_the_record_lists_the_recomputation(tmp_path: Path, capsys):
    # float32: the guard reads the record's machine, not the precision (on a CPU without oneDNN bf16, 54 s in bf16)
    protocol, name = target_made_on_another_cpu(tmp_path, "--other-cpu", "--precision", "32-true")
    protocol.finetune("target", "full", files=True)  # the same weights: this CPU made them
    assert "Other CPU Model 9000" in capsys.readouterr().out
    record = protocol.cache.record(name)
    assert len(record["recomputed"]) == 1
    assert record["recomputed"][0]["result"]["weights_sha256"] == record["result"]["weights_sha256"]


def test_a_run_is_drawn_as_collapsed_from_half_its_forget_answers_degenerate_and_an_old_record_never():
    assert degenerate({"degenerate_rate": 0.5}) and degenerate({"degenerate_rate": 1.0})
    assert not degenerate({"degenerate_rate": 0.475})
    assert not degenerate({"forget_quality": 0.4})  # recorded before the rate


def test_a_fine_tune_row_reads_its_evaluation_and_names_the_evaluations_machine_where_it_ran_on_another():
    record = {"result": {"train_seconds": 12.0, "forget_rougeL_probe": 0.97}, "config": {}, "machine": "Xeon"}
    same = finetune_row("target-x", record, {"result": {"forget_rougeL": 0.85}, "machine": "Xeon"})
    in_float32 = {"result": {"forget_rougeL": 0.93}, "machine": "EPYC"}
    other = finetune_row("target-x, evaluated in float32", record, in_float32)
    # the gate reads the evaluation, not the probe
    assert (same[5], same[-2], same[-1]) == ("0.850", "**failed**", "Xeon")
    assert (other[5], other[-2], other[-1]) == ("0.930", "passed", "Xeon; evaluated on EPYC")
    assert finetune_row("untuned", record, None)[-1] == "Xeon"
    assert chain_title("lora-fp32") == "lora fine-tuning, unlearned and evaluated in float32"
    assert chain_title("full") == "full fine-tuning"


def test_the_stages_still_to_run_name_the_cpu_kind_that_can_run_them():
    xeon = {"machine": "Intel(R) Xeon(R) Processor, 2 cores (2 available to the process), CPU only", "result": {}}
    state = {
        "finetune": {(role, variant): xeon for role in ("target", "retain") for variant in ("lora", "lora-fp32")},
        "eval": {("target", "lora"): {}, ("retain", "lora"): {}, ("retain", "lora-fp32"): {}},
        "sweep": {("lora", "NPO"): {"lr0.0001": {}, "lr0.0003": {}, "lr0.001": {}}},
        "seeds": {("lora", "NPO"): [{}]},
        "runs_on": {"lora": made_on_kinds(xeon), "lora-fp32": ["any CPU"]},
    }
    pending = render_pending(state, ["lora", "lora-fp32"], ["NPO", "KL"])
    kind = "Intel(R) Xeon(R) Processor [avx512f avx512_bf16 avx512_fp16 amx_bf16]"
    assert f"- lora, on {kind} (`--variants lora`): NPO seeds 1/3; KL sweep 0/3" in pending
    assert pending.endswith(
        "- lora-fp32, on any CPU (`--variants lora-fp32`): evaluate target; NPO sweep 0/3; KL sweep 0/3"
    )
    done = {**state, "seeds": {("lora", "NPO"): [{}] * 3}, "sweep": {**state["sweep"], ("lora", "KL"): {"a": {}}}}
    assert render_pending(done, ["lora"], ["NPO"]) == ""


def test_a_stage_records_each_optimiser_steps_mean_micro_batch_loss(tmp_path: Path):
    """Five micro-batches at accumulation 2 make three optimiser steps, the epoch's last one of one micro-batch;
    a fit resumed from a checkpoint (global step 3 at its start) traces its own steps the same way."""

    class FixedLoss(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return batch.sum() + 0 * self.weight  # the batch's value is its loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    batches = torch.utils.data.DataLoader(torch.tensor([[1.0], [3.0], [5.0], [7.0], [11.0]]), batch_size=1)
    trainer = bare_trainer([Progress("fixed", every=1)], root=tmp_path, max_epochs=1, accumulate_grad_batches=2)
    trainer.fit(FixedLoss(), batches)
    assert step_losses(trainer) == [2.0, 6.0, 11.0]
    trainer.save_checkpoint(tmp_path / "epoch1.ckpt")
    resumed = bare_trainer([Progress("fixed", every=1)], root=tmp_path, max_epochs=2, accumulate_grad_batches=2)
    resumed.fit(FixedLoss(), batches, ckpt_path=tmp_path / "epoch1.ckpt")
    assert step_losses(resumed) == [2.0, 6.0, 11.0]


def test_a_seed_std_is_written_on_its_means_scale():
    """Three seeds that agree to 1e-6 print a zero std beside a fixed-point mean; a p-value mean stays scientific."""
    utility = [{"model_utility": 0.298}, {"model_utility": 0.298 + 3e-6}, {"model_utility": 0.298}]
    assert mean_std_of(utility, "model_utility") == "0.298 ± 0.000"
    quality = [{"forget_quality": 1e-5}, {"forget_quality": 3e-5}, {"forget_quality": None}]
    assert mean_std_of(quality, "forget_quality") == "2.00e-05 ± 1.41e-05"
    assert mean_std_of(utility, "model_utility", number="{:.1f}".format) == "0.3 ± 0.0"


def test_a_legacy_amd_record_is_not_recomputed_on_an_epyc_without_its_bf16_instructions(tmp_path: Path, monkeypatch):
    """A record from before machine texts named the bf16 ISA says only "AMD EPYC": its chain was made on a Zen 4, so a
    Zen 3 (the same model name) must stop before the fine-tune, and the Zen 4 may go on."""
    protocol, name = target_recorded_on(tmp_path, "AMD EPYC, 2 cores (2 available to the process), CPU only")
    monkeypatch.setattr(protocol_module, "cpu_kind", lambda: "AMD EPYC [no AVX-512]")
    with pytest.raises(
        SystemExit, match=r"made on AMD EPYC \[avx512f avx512_bf16\], not on this AMD EPYC \[no AVX-512\]"
    ):
        protocol.finetune("target", "full", files=True)
    monkeypatch.setattr(protocol_module, "cpu_kind", lambda: "AMD EPYC [avx512f avx512_bf16]")
    protocol.refuse_other_cpu(name, "full")  # the kind that made it: no stop


def test_a_fine_tune_was_made_on_its_kind_and_on_every_kind_that_reproduced_it_by_training():
    record = {
        "machine": "Intel(R) Xeon(R) Processor, 2 cores (2 available to the process), CPU only",
        "result": {"forget_rougeL_probe": 0.9523487718887574, "weights_sha256": "ab12"},
        "recomputed": [
            {"machine": "CPU A [avx512f], 2 cores (2 available ...)", "result": {"weights_sha256": "ab12"}},
            {"machine": "CPU B [avx512f], 2 cores (2 available ...)", "result": {"forget_rougeL_probe": 0.9351}},
            {"machine": "CPU C [], 2 cores (2 available ...)", "result": {"weights_sha256": "ab12"}, "restored": "x"},
            {"machine": "CPU D [amx_bf16], 2 cores (2 ...)", "result": {"forget_rougeL_probe": 0.9523488283157349}},
        ],
    }
    xeon = "Intel(R) Xeon(R) Processor [avx512f avx512_bf16 avx512_fp16 amx_bf16]"
    assert made_on_kinds(record) == [xeon, "CPU A [avx512f]", "CPU D [amx_bf16]"]


@pytest.mark.slow
def test_sweep_then_the_chosen_setting_on_the_test_seeds(tmp_path: Path, monkeypatch):
    """The whole chain on a tiny model: fine-tunes, evaluations, NPO's sweep (two lrs, to keep it short), then its
    chosen setting on the seeds 1-3, whose runs differ from one another (the seed reaches the batches)."""
    monkeypatch.setattr(protocol_module, "LRS", (1e-5, 1e-3))
    # float32: this test is about the chain and the selection (the other quick runs keep bf16, the protocol's default);
    # on a CPU without oneDNN bf16 it takes 50 s instead of 124 s
    args = quick_args(tmp_path, "--ignore-gate", "--methods", "NPO", "--precision", "32-true")
    protocol = Protocol(args)
    run_protocol(protocol, ["full"], ["NPO"], "seeds")
    state = cached_state(protocol, ["full"], ["NPO"])
    assert set(state["sweep"]["full", "NPO"]) == {"lr1e-05", "lr0.001"}
    chosen, _ = state["chosen"]["full", "NPO"]
    seeds = state["seeds"]["full", "NPO"]
    assert len(seeds) == 3
    ratios = [
        json.loads(protocol.cache.file(f"unlearn/full/NPO/{chosen}/seed{k}", "unlearning_eval.json").read_text())[
            "per_sample"
        ]["forget_truth_ratio"]
        for k in (1, 2, 3)
    ]
    assert ratios[0] != ratios[1] != ratios[2]
    # each run carries its greedy forget answers' mean length, read from its evaluation file
    answers = json.loads(protocol.cache.file(f"unlearn/full/NPO/{chosen}/seed1", "unlearning_eval.json").read_text())
    lengths = [len(answer) for answer in answers["per_sample"]["forget_answers"]]
    assert seeds[0][ANSWER_CHARS] == pytest.approx(sum(lengths) / len(lengths))


def test_the_methods_table_shows_the_utility_terms_and_answer_length_over_the_seeds():
    """Retain and real_authors ROUGE-L and the forget answers' length, mean ± std over the test seeds, beside MU; a
    record without saved answers leaves its length out of the mean."""
    ks_sizes = {"forget_quality_n": 40, "forget_quality_reference_n": 40}
    seed_runs = [
        {
            **run(0.1, 0.3),
            "retain_rougeL": 0.8,
            "real_authors_rougeL": 0.05,
            ANSWER_CHARS: 100.0,
            "fit_seconds": 10,
            **ks_sizes,
        },
        {
            **run(0.1, 0.3),
            "retain_rougeL": 0.9,
            "real_authors_rougeL": 0.07,
            ANSWER_CHARS: 200.0,
            "fit_seconds": 10,
            **ks_sizes,
        },
        {
            **run(0.1, 0.3),
            "retain_rougeL": 0.85,
            "real_authors_rougeL": 0.06,
            ANSWER_CHARS: None,
            "fit_seconds": 10,
            **ks_sizes,
        },
    ]
    state = {
        "sweep": {("lora", "NPO"): {"lr0.001": seed_runs[0]}},
        "chosen": {("lora", "NPO"): ("lr0.001", True)},
        "seeds": {("lora", "NPO"): seed_runs},
    }
    header, _, row = render_methods(state, ["lora"], ["NPO"]).splitlines()[-3:]
    cells = dict(zip((name.strip() for name in header.split("|")), row.split("|"), strict=True))
    assert cells["retain ROUGE-L"].strip() == "0.850 ± 0.050"
    assert cells["real_authors ROUGE-L"].strip() == "0.060 ± 0.010"
    assert cells["forget answer (chars)"].strip() == "150 ± 71"


@pytest.mark.slow
def test_every_method_runs_on_a_quick_lora_target_and_the_report_renders(tmp_path: Path, monkeypatch):
    """One setting of each method's sweep on a tiny LoRA target (RMU's released layer 7 is past its two layers; its
    Model Utility is 0, so no single term has a threshold), then the report with a sweep row for each method; then the
    float32 variant on the same target (sharing the bf16 chain's fine-tunes and evaluations keeps the suite short)."""
    monkeypatch.setattr(protocol_module, "run_order", lambda settings: settings[:1])
    methods = list(protocol_module.METHODS)
    every = ["--methods", ",".join(methods)]
    args = quick_args(tmp_path, "--ignore-gate", "--phase", "sweep", "--variants", "lora", *every)
    report = protocol_module.protocol_section(args)
    protocol = Protocol(args)
    state = cached_state(protocol, ["lora"], methods)
    assert all(len(state["sweep"]["lora", method]) == 1 for method in methods)
    for method in methods:
        assert f"| {method} (lora) | {setting_name(sweep(method, 'lora')[0])} |" in report
    records = protocol.cache
    assert records.record("unlearn/lora/RMU/lr1e-05/seed0")["config"]["layer"] == 1
    finetuned = records.record(protocol.stage("finetune", "target", "lora"))["result"]
    assert len(finetuned["train_loss"]) == finetuned["optimizer_steps"] > 0  # one loss per optimiser step
    for method in methods:  # every run records its loss trace, so a null result can be read from its record
        result = records.record(f"unlearn/lora/{method}/{setting_name(sweep(method, 'lora')[0])}/seed0")["result"]
        assert result["train_loss"] and all(map(math.isfinite, result["train_loss"])), method
    assert (tmp_path / "unlearning_tofu20_fq_mu.png").is_file()
    # a render for another variant and one method still shows every method's LoRA rows: the doc is rewritten whole
    only_full = quick_args(tmp_path, "--render-only", "--variants", "full", "--methods", "NPO")
    rerendered = protocol_module.protocol_section(only_full)
    assert all(f"| {method} (lora) |" in rerendered for method in methods)
    assert "- full: fine-tune target; fine-tune retain; " in rerendered and "; NPO sweep 0/" in rerendered
    float32_chain_on_the_same_target(tmp_path)


def float32_chain_on_the_same_target(tmp_path: Path) -> None:
    """After a bf16 LoRA chain in ``tmp_path``: the float32 variant evaluates the target again in float32 (its own
    stage) and unlearns in float32 against the bf16 chain's retain-model evaluation, which it does not recompute; the
    report shows both evaluations of the target and the float32 chain's run."""
    args = quick_args(tmp_path, "--ignore-gate", "--phase", "sweep", "--variants", "lora-fp32", "--methods", "NPO")
    protocol = Protocol(args)
    target, reference = (
        protocol.stage(kind, role, "lora-fp32") for kind, role in (("finetune", "target"), ("eval", "retain"))
    )
    before = protocol.cache.record(reference)
    report = protocol_module.protocol_section(args)
    assert protocol.cache.record(reference) == before  # the FQ reference is the bf16 chain's, not recomputed
    bf16, fp32 = (protocol.cache.record(protocol.stage("eval", "target", v)) for v in ("lora", "lora-fp32"))
    assert (bf16["config"]["precision"], fp32["config"]["precision"]) == ("bf16-mixed", "32-true")
    assert fp32["config"]["reference"] == bf16["config"]["reference"] == before["config_digest"]
    assert fp32["result"]["forget_prob"] != bf16["result"]["forget_prob"]  # the precision reaches the evaluation
    setting = setting_name(sweep("NPO", "lora-fp32")[0])
    unlearned = protocol.cache.record(f"unlearn/lora-fp32/NPO/{setting}/seed0")["config"]
    assert unlearned["precision"] == "32-true"
    assert unlearned["evaluation"] == config_digest(protocol.evaluate_config(target, reference, "32-true"))
    assert f"| NPO (lora-fp32) | {setting} |" in report and "| NPO (lora) |" in report
    assert f"| {target.removeprefix('finetune/')}, evaluated in float32 |" in report


def test_a_new_checkout_rebuilds_a_lora_fine_tune_from_its_committed_adapters_without_training(tmp_path: Path, capsys):
    first = Protocol(quick_args(tmp_path, "--phase", "gate"))
    made = read_checkpoint(first.finetune("target", "lora"))
    name = f"finetune/{first.model('target', 'lora')}"
    assert (first.cache.record_directory(name) / protocol_module.ADAPTERS_FILE).is_file()
    places = ["--workdir", str(tmp_path / "work2"), "--records", str(tmp_path / "rec")]  # same records, no files
    fresh = Protocol(parse_args(["--sections", "protocol", "--quick", "--phase", "gate", *places]))

    def no_training(*args, **kwargs):
        raise AssertionError("a fine-tune with committed adapters is rebuilt, not trained")

    fresh.trainer = no_training
    capsys.readouterr()
    rebuilt = read_checkpoint(fresh.finetune("target", "lora", files=True))
    key, weight = next((k, w) for k, w in made["state_dict"].items() if "lora_B" in k)
    assert f"{name}: rebuilding its files from the kept ones" in capsys.readouterr().out
    assert rebuilt["hyper_parameters"] == made["hyper_parameters"]
    assert made["state_dict"].keys() == rebuilt["state_dict"].keys()
    assert all(torch.equal(made["state_dict"][k], rebuilt["state_dict"][k]) for k in made["state_dict"])
    assert fresh.cache.record(name)["recomputed"][0]["restored"] == f"from the kept {protocol_module.ADAPTERS_FILE}"
    # made on another kind of CPU: the bf16 chain stops (it would mix two roundings), the float32 one goes on
    say_made_on(fresh, name, OTHER_CPU)
    with pytest.raises(SystemExit, match=f"{name}: .*made on Other CPU Model 9000.*--variants lora-fp32 "):
        fresh.finetune("target", "lora", files=True)
    assert torch.equal(read_checkpoint(fresh.finetune("target", "lora-fp32", files=True))["state_dict"][key], weight)
    tokens = torch.arange(1, 9).unsqueeze(0)
    logits = [
        CausalLMFineTuning(lm={"name_or_path": str(cache.path(name) / "model.ckpt")}).model(tokens).logits
        for cache in (first.cache, fresh.cache)
    ]
    assert torch.equal(*logits)


def test_the_committed_records_are_current_for_the_code_that_would_resume_them():
    """Every chain with committed unlearning records: its fine-tunes' and its target evaluation's configurations
    still give the recorded digests, and each run names that fine-tune and that evaluation. A change that moved a real
    run's configuration (a --quick option leaking into it, say) would silently recompute hours of CPU stages."""
    protocol = Protocol(parse_args(["--sections", "protocol"]))
    chains = sorted(path.name for path in (protocol.args.records / "unlearn").iterdir())
    assert {"full", "lora", "lora-fp32"} <= set(chains)
    for variant in chains:
        for role in ("target", "retain"):
            recorded = protocol.cache.record(protocol.stage("finetune", role, variant))["config_digest"]
            assert recorded == config_digest(protocol.finetune_config(role, variant)), (variant, role)
        target, reference = protocol.stage("finetune", "target", variant), protocol.stage("eval", "retain", variant)
        evaluation = config_digest(protocol.evaluate_config(target, reference, protocol.precision(variant)))
        assert protocol.cache.record(protocol.stage("eval", "target", variant))["config_digest"] == evaluation
        target_digest = protocol.cache.record(target)["config_digest"]
        runs = list((protocol.args.records / "unlearn" / variant).glob("*/*/seed*/stage.json"))
        assert runs, variant
        for run_record in runs:
            config = json.loads(run_record.read_text())["config"]
            assert config["evaluation"] == evaluation, run_record
            assert config["target"] == target_digest, run_record
        layer_search = protocol.args.records / "lunar-layer" / variant / "stage.json"
        if layer_search.is_file():  # LUNAR's layer, searched once per target: the search this chain would run
            recorded = json.loads(layer_search.read_text())["config_digest"]
            assert recorded == config_digest(protocol.lunar_layer_config(variant)), layer_search


def test_a_float32_variant_shares_its_base_models_and_reference_and_evaluates_its_target_itself(tmp_path: Path):
    places = ["--workdir", str(tmp_path / "w"), "--records", str(tmp_path / "r")]
    protocol = Protocol(parse_args(["--sections", "protocol", "--variants", "lora-fp32", *places]))
    for role in ("target", "retain"):
        assert protocol.stage("finetune", role, "lora-fp32") == f"finetune/{role}-lora-lr0.003-ep10"
    assert protocol.stage("eval", "retain", "lora-fp32") == "eval/retain-lora-lr0.003-ep10"
    assert protocol.stage("eval", "target", "lora-fp32") == "eval/target-lora-lr0.003-ep10-fp32"
    assert (protocol.precision("lora-fp32"), protocol.precision("lora")) == ("32-true", "bf16-mixed")
    assert sweep("NPO", "lora-fp32") == sweep("NPO", "lora") and sweep("RMU", "full-fp32") == sweep("RMU", "full")
    with pytest.raises(SystemExit, match=r"--variants lora-fp32 with --precision 32-true: .* use --variants lora"):
        parse_args(["--sections", "protocol", "--variants", "lora-fp32", "--precision", "32-true", *places])


def test_an_unlearning_runs_adapters_are_merged_before_its_evaluation():
    tiny = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_positions": 64}
    module = CausalLMFineTuning(lm={"name_or_path": "tiny-llama", "tiny": tiny, "lora": protocol_module.LORA})
    for name, weight in module.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight)  # adapters that change the function (peft starts B at zero)
    module.model.eval()
    tokens = torch.arange(1, 9).unsqueeze(0)
    with torch.no_grad():
        unmerged = module.model(tokens).logits
        protocol_module.merge_adapters(module)
        merged = module.model(tokens).logits
    layers = [m for m in module.model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A")]
    assert layers and all(layer.merged for layer in layers)
    torch.testing.assert_close(merged, unmerged, rtol=1e-4, atol=1e-4)
