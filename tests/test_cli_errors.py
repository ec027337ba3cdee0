"""Errors print one line (key, value, file, what is valid) and exit non-zero, writing nothing;
``--debug`` gives the traceback. Every case runs ``trustlit.cli.main`` in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICKSTART, REPO_ROOT, TINY

from trustlit.cli import main, run_cli

UNLEARN = REPO_ROOT / "recipes" / "quickstart" / "unlearn_fictitious.yaml"
DPSGD = REPO_ROOT / "recipes" / "privacy" / "dpsgd_mlp_digits.yaml"


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def error_line(capsys, args: list[str], status: int) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == status
    err = capsys.readouterr().err.strip().splitlines()
    # only the last line: pytest's capture closes streams that Lightning's log handler still holds
    assert err[-1].startswith("trustlit: error: ") and not any(e.startswith("trustlit: ") for e in err[:-1]), err
    return err[-1].removeprefix("trustlit: error: ")


def quickstart(root: Path, *extra: str, recipe: Path = QUICKSTART) -> list[str]:
    return ["fit", "-c", str(recipe), *TINY, f"--trainer.default_root_dir={root}", "--trainer.max_steps=1", *extra]


def test_unknown_key_in_a_recipe_names_the_file_and_the_key(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(QUICKSTART.read_text().replace("    lr: 3.0e-3\n", "    lr: 3.0e-3\n    learning_rat: 1\n"))
    line = error_line(capsys, ["fit", "-c", str(recipe), f"--trainer.default_root_dir={tmp_path}"], status=2)
    assert line.startswith(f"unknown key 'model.init_args.learning_rat' in {recipe}")
    assert "lr" in line.split("valid:")[1], "what is valid"
    assert files(tmp_path) == [recipe]


def test_bad_value_names_the_key_value_and_type(tmp_path, capsys):
    line = error_line(capsys, quickstart(tmp_path, "--trainer.max_epochs=many"), status=2)
    assert line == "trainer.max_epochs=many: expected int or None"
    assert files(tmp_path) == []


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--model.init_args.lr=-1", "model.init_args.lr=-1: expected a number > 0 (PositiveFloat)"),
        (
            "--model.init_args.lr_schedule=cosin",
            "model.init_args.lr_schedule=cosin: expected one of 'constant', 'linear', 'cosine'",
        ),
    ],
)
def test_a_bad_method_argument_names_its_full_key_and_what_is_valid(tmp_path, capsys, override, message):
    assert error_line(capsys, quickstart(tmp_path, override), status=2) == message
    assert files(tmp_path) == []


def test_unknown_option_on_the_command_line(tmp_path, capsys):
    line = error_line(capsys, quickstart(tmp_path, "--trainer.max_epohs=3"), status=2)
    assert "--trainer.max_epohs=3" in line
    assert files(tmp_path) == []


def test_max_epochs_zero_is_refused(tmp_path, capsys):
    assert "max_epochs=0" in error_line(capsys, quickstart(tmp_path, "--trainer.max_epochs=0"), status=2)
    assert files(tmp_path) == []


def test_a_data_file_that_is_not_utf8_names_the_file_and_byte(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "full.json").write_bytes(b'{"question": "q", "answer": "caf\xe9"}\n')
    (data / "forget10.json").write_text('{"question": "q", "answer": "a"}\n')
    line = error_line(capsys, quickstart(tmp_path / "run", f"--data.init_args.source={data}"), status=1)
    assert line.startswith(f"{data / 'full.json'}: not UTF-8 text (byte 32:")
    assert files(tmp_path / "run") == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,b,label\n1,2,cat\n3,4,dog\n", "the label column 'label' must hold numbers"),
        ("a,b,label\n1,x,0\n3,4,1\n", ":2: column 'b' is missing or not a number"),
    ],
    ids=["label", "feature"],
)
def test_a_csv_with_text_names_the_column(tmp_path, capsys, content, message):
    csv = tmp_path / "table.csv"
    csv.write_text(content)
    args = ["fit", "-c", str(DPSGD), f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.fast_dev_run=true"]
    line = error_line(capsys, [*args, f"--data.init_args.dataset={csv}", "--data.init_args.target_column=label"], 1)
    assert line.startswith(str(csv)) and message in line
    assert files(tmp_path / "run") == []


def test_num_features_that_does_not_match_the_data_names_both(tmp_path, capsys):
    args = ["fit", "-c", str(DPSGD), f"--trainer.default_root_dir={tmp_path}", "--trainer.fast_dev_run=true"]
    line = error_line(capsys, [*args, "--model.init_args.num_features=10"], status=1)
    assert line.startswith("model.init_args.num_features=10 but the data (TabularDataModule) has 64 features")
    assert files(tmp_path) == []


def test_forget_split_equal_to_retain_split_is_refused(tmp_path, capsys):
    tiny_model = "--model.init_args.lm.name_or_path=tiny-llama"  # instead of the quickstart's checkpoint
    args = quickstart(tmp_path, tiny_model, "--data.init_args.retain_split=forget10", recipe=UNLEARN)
    line = error_line(capsys, args, status=1)
    assert line.startswith("forget_split and retain_split are both 'forget10'")
    assert files(tmp_path) == []


def test_a_tiny_block_with_a_model_directory_is_refused(tmp_path, capsys):
    line = error_line(capsys, quickstart(tmp_path, f"--model.init_args.lm.name_or_path={tmp_path}"), status=1)
    assert line.startswith("lm.tiny is set ({'hidden_size': 32") and f"lm.name_or_path={tmp_path}" in line
    assert files(tmp_path) == []


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="max_epochs=0"):
        main([*quickstart(tmp_path, "--trainer.max_epochs=0"), "--debug"])
    monkeypatch.setenv("TRUSTLIT_DEBUG", "1")
    with pytest.raises(ValueError, match="max_epochs=0"):
        main(quickstart(tmp_path, "--trainer.max_epochs=0"))


def test_help_and_recipes_import_no_torch():
    code = (
        "from trustlit.cli import main; main(['--help']); main(['recipes']); import sys; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_output_is_quiet_by_default(tmp_path, capsys, caplog):
    """No litlogger tip, no FLOPs, no v_num, and one results table whose metric names are whole in a file."""
    split_table = '--trainer.callbacks=[{"class_path": "trustlit.callbacks.SplitMetricsTable"}]'
    bar = "--trainer.enable_progress_bar=true"  # TINY turns it off
    args = [*quickstart(tmp_path, split_table, bar), "--trainer.limit_val_batches=0", "--trainer.limit_test_batches=1"]
    fit = run_cli(args)
    assert "v_num" not in fit.trainer.progress_bar_callback.get_metrics(fit.trainer, fit.model)
    tested = run_cli(["test", *args[1:]])
    out = capsys.readouterr().out
    logged = caplog.text + out
    assert "litlogger" not in logged and "flops" not in logged.lower()
    assert "already configured with model summary" not in logged
    assert out.count("test metrics per split") == 1 and "Test metric" not in out, "Lightning's table is off"
    names = {key.split("/")[-1] for key in tested.trainer.callback_metrics if key.startswith("test/")}
    assert names and all(f" {name} " in out for name in names), "metric names are not cut"


def test_an_evaluation_callback_prints_the_one_results_table_of_a_test(tmp_path, capsys):
    """The quickstart recipe has SplitMetricsTable and UnlearningEvaluation: `test` prints the evaluation's table
    alone (the split table still prints after validation)."""
    args = [*quickstart(tmp_path), "--trainer.limit_test_batches=1", "--trainer.callbacks.init_args.max_samples=2"]
    run_cli(args)
    capsys.readouterr()
    run_cli(["test", *args[1:], "--ckpt_path=last"])
    out = capsys.readouterr().out
    assert out.count("unlearning evaluation") == 1
    assert "test metrics per split" not in out and "Test metric" not in out
