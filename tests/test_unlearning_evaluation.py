"""The UnlearningEvaluation callback end to end: fine-tune a tiny Llama, test, write and reuse the reference."""

from __future__ import annotations

import csv
import inspect
import json
import warnings
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger
from scipy.stats import ks_2samp

from trustlit import CausalLMFineTuning, CausalLMSpec
from trustlit.cli import main
from trustlit.data import FictitiousConfig, QADataModule, load_qa_split
from trustlit.metrics import answer_rates, score_split
from trustlit.paths import write_json_atomic
from trustlit.unlearning.evaluation import UnlearningEvaluation, forget_quality_results

TINY = {"hidden_size": 32, "num_layers": 2, "num_heads": 2}
CORPUS = FictitiousConfig(num_authors=4, seed=0, num_perturbed=2)
# 4 authors: forget25 is the last one, retain75 the first three, retain25 the first one
SPLITS = {
    "forget_split": "forget25",
    "retain_split": "retain75",
    "real_authors_split": None,
    "world_facts_split": None,
    "holdout_split": "retain25",
}
TOFU_NAMES = [f"{s}_{m}" for s in ("forget", "retain") for m in ("prob", "rougeL", "truth_ratio")]
METRICS = [
    *TOFU_NAMES,
    "model_utility",
    "refusal_rate",
    "non_answer_rate",
    "fabrication_rate",
    "degenerate_rate",
    "verbmem",
    "knowmem_forget",
    "knowmem_retain",
    "minkprob_auc",
]


def evaluation(**kwargs) -> UnlearningEvaluation:
    defaults = {"batch_size": 6, "max_new_tokens": 4, "max_samples": 4, "on": ["fit_end", "test"]}
    return UnlearningEvaluation(**{**SPLITS, **defaults, **kwargs})


def make_trainer(root: Path, callback: UnlearningEvaluation) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=3,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger(root),
        default_root_dir=root,
        callbacks=[callback],
    )


def make_module() -> CausalLMFineTuning:
    return CausalLMFineTuning(lm=CausalLMSpec(name_or_path="tiny-llama", tiny=TINY), lr=1e-3, generate=False)


def make_datamodule() -> QADataModule:
    return QADataModule(
        source="fictitious",
        train_split="full",
        eval_splits=["forget25"],
        batch_size=4,
        max_length=96,
        fictitious=CORPUS,
    )


def logged(trainer: L.Trainer) -> dict[str, float]:
    """The last non-empty value of every column of the CSVLogger's metrics.csv."""
    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:
        return {key: float(value) for row in csv.DictReader(handle) for key, value in row.items() if value}


def test_evaluation_writes_logs_and_serves_as_reference(tmp_path):
    module, datamodule = make_module(), make_datamodule()
    callback = evaluation(on=["fit_end", "test"])
    trainer = make_trainer(tmp_path / "retain_model", callback)
    trainer.fit(module, datamodule=datamodule)
    written = tmp_path / "retain_model" / "unlearning_eval.json"
    assert written.is_file(), "fit_end evaluates too"
    after_fit = dict(callback.results)
    assert module.model.training, "the model's train mode is restored after evaluation"

    trainer.test(module, datamodule=datamodule)
    report = json.loads(written.read_text())
    assert sorted(report["metrics"]) == sorted(METRICS)
    assert report["metrics"] == pytest.approx(callback.results)
    assert callback.results == pytest.approx(after_fit), "same model, same numbers"
    assert report["splits"] == {"forget": "forget25", "retain": "retain75", "holdout": "retain25"}
    assert len(report["per_sample"]["forget_truth_ratio"]) == 4
    assert len(report["per_sample"]["holdout_min_k"]) == 4
    # the saved greedy forget answers are the ones the refusal / non-answer / fabrication rates counted
    assert len(report["per_sample"]["forget_answers"]) == 4
    references = load_qa_split("fictitious", "forget25", CORPUS)["answer"][:4]  # max_samples
    rates = answer_rates(report["per_sample"]["forget_answers"], references)
    assert rates == pytest.approx({name: callback.results[name] for name in rates})
    assert all(0 <= callback.results[name] <= 1 for name in METRICS)
    unlearn_logged = {k: v for k, v in logged(trainer).items() if k.startswith("unlearn/")}
    assert unlearn_logged == pytest.approx({f"unlearn/{k}": v for k, v in callback.results.items()}, rel=1e-5)

    # the same model against itself as the retain model: identical truth ratios and AUC
    compared = evaluation(reference=str(written), output=str(tmp_path / "unlearned.json"))
    make_trainer(tmp_path / "unlearned", compared).test(module, datamodule=datamodule)
    assert compared.results["forget_quality"] == 1.0
    assert compared.results["forget_quality_n"] == compared.results["forget_quality_reference_n"] == 4
    assert list(compared.results).index("forget_quality_n") == list(compared.results).index("forget_quality") + 1
    assert compared.results["privleak"] == 0.0
    assert compared.results["model_utility"] == pytest.approx(callback.results["model_utility"])
    assert json.loads((tmp_path / "unlearned.json").read_text())["metrics"]["forget_quality"] == 1.0


def fit_fails_before_training(tmp_path: Path, callback: UnlearningEvaluation, error: type, match: str) -> None:
    trainer = make_trainer(tmp_path, callback)
    with pytest.raises(error, match=match):
        trainer.fit(make_module(), datamodule=make_datamodule())
    assert trainer.global_step == 0


def test_a_missing_reference_fails_before_training(tmp_path):
    missing = tmp_path / "nowhere" / "unlearning_eval.json"
    fit_fails_before_training(tmp_path, evaluation(reference=str(missing)), FileNotFoundError, str(missing))


def test_a_reference_is_needed_only_by_the_stages_that_evaluate(tmp_path):
    missing = tmp_path / "later" / "unlearning_eval.json"
    callback = evaluation(reference=str(missing), on=["test"])
    trainer = make_trainer(tmp_path, callback)
    module, datamodule = make_module(), make_datamodule()
    trainer.fit(module, datamodule=datamodule)  # the retain model may be evaluated after unlearning
    assert trainer.global_step == 3
    with pytest.raises(FileNotFoundError, match=str(missing)):
        trainer.test(module, datamodule=datamodule)
    assert callback.results == {}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ({"splits": {"forget": "forget25"}}, "per_sample.forget_truth_ratio"),
        ({"splits": {"forget": "forget10"}, "per_sample": {"forget_truth_ratio": [1.0]}}, "'forget10', not 'forget25'"),
        (
            {"splits": {"forget": "forget25"}, "per_sample": {"forget_truth_ratio": [1.0]}, "metrics": {}},
            "metrics.minkprob_auc",
        ),
    ],
)
def test_a_malformed_reference_fails_before_training(tmp_path, content, match):
    path = tmp_path / "reference.json"
    if isinstance(content, str):
        path.write_text(content)
    else:
        write_json_atomic(path, content)
    fit_fails_before_training(tmp_path, evaluation(reference=str(path)), ValueError, f"{path}.*{match}")


def test_an_unknown_split_fails_before_training(tmp_path):
    # TOFU's default names do not exist in the fictitious corpus
    callback = evaluation(forget_split="forget05_perturbed")
    fit_fails_before_training(tmp_path, callback, ValueError, "unknown split 'forget05_perturbed'")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"on": ["validate"]}, "on must be"), ({"batch_size": 0}, "batch_size"), ({"min_k": 1.5}, "min_k")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evaluation(**kwargs)


def test_forget_quality_reports_the_ks_sample_sizes_and_warns_when_they_differ():
    ratios, reference = [0.5, 1.0, 2.0, 4.0], [0.25, 0.5, 1.5, 3.0, 6.0, 8.0]
    with pytest.warns(UserWarning, match=r"compares 4 forget truth ratios with the reference's 6.*max_samples"):
        results = forget_quality_results(ratios, reference)
    assert results == {
        "forget_quality": pytest.approx(ks_2samp(ratios, reference).pvalue, abs=1e-12),
        "forget_quality_n": 4,
        "forget_quality_reference_n": 6,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # equal sizes: no warning
        assert forget_quality_results(ratios, ratios)["forget_quality"] == 1.0


def test_generation_defaults_to_tofus_200_new_tokens():
    assert UnlearningEvaluation().max_new_tokens == 200
    assert inspect.signature(score_split).parameters["max_new_tokens"].default == 200


def test_compare_prints_runs_side_by_side(tmp_path, capsys):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    write_json_atomic(before, {"metrics": {"forget_prob": 0.9, "model_utility": 0.5}})
    write_json_atomic(after, {"metrics": {"forget_prob": 0.125, "forget_quality": 0.25, "forget_quality_n": 40}})
    main(["compare", f"before={before}", f"after={after}"])
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
        for line in capsys.readouterr().out.splitlines()
        if line.count("│") == 4
    }
    assert rows["forget_prob"] == ["0.9000", "0.1250"]
    assert rows["model_utility"] == ["0.5000", "-"]
    assert rows["forget_quality"] == ["-", "0.2500"]
    assert rows["forget_quality_n"] == ["-", "40"], "sample sizes print as counts"
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(tmp_path / "missing.json")])
    assert exit_info.value.code != 0
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="usage"):
        main(["compare"])
