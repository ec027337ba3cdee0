"""StageCache: a finished stage is not recomputed, a changed configuration is, and nothing is half-written."""

from __future__ import annotations

import json

import pytest
import torch

from trustlit.paths import TEMP_SUFFIX
from trustlit.stages import (
    RECORD_NAME,
    StageCache,
    StageNotReproduced,
    check_reproduced,
    config_digest,
    first_difference,
    tensors_digest,
)


def counting_stage(calls: list[int], value: int):
    def compute(directory):
        calls.append(value)
        (directory / "artifact.txt").write_text(str(value))
        return {"value": value}

    return compute


def test_finished_stage_is_not_recomputed(tmp_path):
    cache, calls = StageCache(tmp_path, command="bench"), []
    assert cache.run("finetune/target", {"lr": 1e-4}, counting_stage(calls, 1)) == {"value": 1}
    assert cache.run("finetune/target", {"lr": 1e-4}, counting_stage(calls, 2)) == {"value": 1}
    assert calls == [1]
    assert (cache.path("finetune/target") / "artifact.txt").read_text() == "1"
    record = json.loads((tmp_path / "finetune" / "target" / RECORD_NAME).read_text())
    assert record["command"] == "bench" and record["config"] == {"lr": 1e-4}
    assert record["wall_seconds"] >= 0 and record["machine"] and record["started"]


def test_changed_configuration_recomputes_and_replaces(tmp_path):
    cache, calls = StageCache(tmp_path), []
    cache.run("eval", {"lr": 1e-4, "seed": 0}, counting_stage(calls, 1))
    assert cache.done("eval", {"seed": 0, "lr": 1e-4})  # key order does not matter
    assert not cache.done("eval", {"lr": 3e-4, "seed": 0})
    assert cache.run("eval", {"lr": 3e-4, "seed": 0}, counting_stage(calls, 2)) == {"value": 2}
    assert calls == [1, 2]
    assert (cache.path("eval") / "artifact.txt").read_text() == "2"
    assert cache.record("eval")["config_digest"] == config_digest({"seed": 0, "lr": 3e-4})


def test_failed_stage_leaves_nothing_and_keeps_the_older_result(tmp_path):
    cache = StageCache(tmp_path)
    cache.run("stage", {"a": 1}, counting_stage([], 1))

    def fails(directory):
        (directory / "partial.bin").write_bytes(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        cache.run("stage", {"a": 2}, fails)
    assert cache.record("stage")["result"] == {"value": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage"]  # no scratch directory left behind


def test_a_killed_stage_leaves_scratch_that_its_next_run_removes(tmp_path):
    killed = tmp_path / "finetune" / f".target.abc123{TEMP_SUFFIX}"  # as atomic_directory names its scratch
    killed.mkdir(parents=True)
    (killed / "model.ckpt").write_bytes(b"half")
    StageCache(tmp_path).run("finetune/target", {"lr": 1}, counting_stage([], 1))
    assert sorted(p.name for p in (tmp_path / "finetune").iterdir()) == ["target"]


def test_bad_names_and_configurations_are_errors(tmp_path):
    cache = StageCache(tmp_path)
    with pytest.raises(ValueError, match="relative path"):
        cache.path("../outside")
    with pytest.raises(ValueError, match="JSON-serialisable"):
        cache.run("stage", {"model": object()}, counting_stage([], 1))


def test_committed_records_give_results_without_files_and_recompute_only_when_files_are_needed(tmp_path):
    records, calls = tmp_path / "records", []
    first = StageCache(tmp_path / "checkout1", records=records)
    first.run("eval/retain", {"lr": 1}, counting_stage(calls, 1), keep=("artifact.txt",))
    assert (records / "eval" / "retain" / RECORD_NAME).is_file()
    assert first.file("eval/retain", "artifact.txt") == records / "eval" / "retain" / "artifact.txt"
    fresh = StageCache(tmp_path / "checkout2", records=records)  # a new checkout: records only, no files
    assert fresh.done("eval/retain", {"lr": 1}) and not fresh.has_files("eval/retain", {"lr": 1})
    assert fresh.run("eval/retain", {"lr": 1}, counting_stage(calls, 2)) == {"value": 1}
    assert calls == [1]
    assert fresh.run("eval/retain", {"lr": 1}, counting_stage(calls, 3), files=True) == {"value": 1}
    assert calls == [1, 3] and (fresh.path("eval/retain") / "artifact.txt").read_text() == "3"
    record = fresh.record("eval/retain")
    assert record["result"] == {"value": 1} and [r["result"] for r in record["recomputed"]] == [{"value": 3}]
    assert (records / "eval" / "retain" / "artifact.txt").read_text() == "1"  # the first result's kept file
    assert fresh.run("eval/retain", {"lr": 1}, counting_stage(calls, 4), files=True) == {"value": 1}
    assert calls == [1, 3]  # the files are there now


def test_a_kept_file_that_was_not_written_is_an_error_and_commits_no_record(tmp_path):
    cache = StageCache(tmp_path / "work", records=tmp_path / "records")
    with pytest.raises(FileNotFoundError, match=r"'missing\.json'"):
        cache.run("eval", {"a": 1}, counting_stage([], 1), keep=("missing.json",))
    assert cache.record("eval") is None


def test_a_recomputation_that_does_not_reproduce_the_checked_keys_fails_and_keeps_the_first_files(tmp_path):
    records, calls = tmp_path / "records", []
    StageCache(tmp_path / "checkout1", records=records).run("finetune/target", {"lr": 1}, counting_stage(calls, 1))
    fresh = StageCache(tmp_path / "checkout2", records=records)

    def drifted(directory):
        (directory / "artifact.txt").write_text("drifted")
        return {"value": 1 + 1e-3}

    with pytest.raises(StageNotReproduced, match=r"'finetune/target' recomputed on .* value = 1\.001, its record"):
        fresh.run("finetune/target", {"lr": 1}, drifted, files=True, reproduce=("value",))
    assert not fresh.path("finetune/target").exists() and "recomputed" not in fresh.record("finetune/target")

    def reproduced(directory):
        (directory / "artifact.txt").write_text("again")
        return {"value": 1 + 1e-9}  # float32 and float64 renderings of one number differ by this much

    assert fresh.run("finetune/target", {"lr": 1}, reproduced, files=True, reproduce=("value",)) == {"value": 1}
    assert (fresh.path("finetune/target") / "artifact.txt").read_text() == "again"
    assert [r["result"] for r in fresh.record("finetune/target")["recomputed"]] == [{"value": 1 + 1e-9}]


def kept_adapters_stage(calls: list[str]):
    """A fine-tune that writes large weights and the small file they are rebuilt from."""

    def compute(directory):
        calls.append("computed")
        (directory / "adapters.txt").write_text("A")
        (directory / "model.txt").write_text("base+A")
        return {"digest": "base+A", "probe": 0.9}

    return compute


def rebuild(calls: list[str], extra: str = ""):
    def restore(directory, kept):
        calls.append("restored")
        (directory / "model.txt").write_text("base+" + (kept / "adapters.txt").read_text() + extra)
        return {"digest": (directory / "model.txt").read_text()}

    return restore


def test_a_recorded_stage_is_restored_from_its_kept_files_instead_of_computed(tmp_path):
    records, calls = tmp_path / "records", []
    options = {"files": True, "keep": ("adapters.txt",), "reproduce": ("digest", "probe")}
    first = StageCache(tmp_path / "checkout1", records=records)
    first.run("finetune/t", {"lr": 1}, kept_adapters_stage(calls), keep=("adapters.txt",))
    fresh = StageCache(tmp_path / "checkout2", records=records)
    with pytest.raises(StageNotReproduced, match=r"digest = 'base\+AX'"):
        fresh.run("finetune/t", {"lr": 1}, kept_adapters_stage(calls), restore=rebuild(calls, "X"), **options)
    assert not fresh.path("finetune/t").exists()
    result = fresh.run("finetune/t", {"lr": 1}, kept_adapters_stage(calls), restore=rebuild(calls), **options)
    assert calls == ["computed", "restored", "restored"]
    assert result == {"digest": "base+A", "probe": 0.9}  # the probe is the record's: a restore does not rerun it
    assert (fresh.path("finetune/t") / "model.txt").read_text() == "base+A"
    rebuilt = fresh.record("finetune/t")["recomputed"][0]
    assert rebuilt["restored"] == "from the kept adapters.txt" and rebuilt["result"] == {"digest": "base+A"}


def test_a_recomputation_adds_the_kept_files_an_older_record_lacks_and_restores_need_them(tmp_path):
    records, calls = tmp_path / "records", []
    options = {"files": True, "keep": ("adapters.txt",), "reproduce": ("digest",), "restore": rebuild(calls)}
    StageCache(tmp_path / "old", records=records).run("finetune/t", {"lr": 1}, kept_adapters_stage(calls))
    assert not (records / "finetune" / "t" / "adapters.txt").exists()  # made before the file was kept
    new = StageCache(tmp_path / "new", records=records)
    assert not new.restorable("finetune/t", ("adapters.txt",))
    new.run("finetune/t", {"lr": 1}, kept_adapters_stage(calls), **options)
    assert calls == ["computed", "computed"]  # nothing to restore from yet
    assert (records / "finetune" / "t" / "adapters.txt").read_text() == "A"
    following = StageCache(tmp_path / "next", records=records)
    assert following.restorable("finetune/t", ("adapters.txt",)) and not following.restorable("finetune/t", ())
    following.run("finetune/t", {"lr": 1}, kept_adapters_stage(calls), **options)
    assert calls == ["computed", "computed", "restored"]


def test_a_restore_that_gives_no_key_to_check_is_an_error(tmp_path):
    records = tmp_path / "records"
    StageCache(tmp_path / "a", records=records).run("t", {}, kept_adapters_stage([]), keep=("adapters.txt",))
    with pytest.raises(ValueError, match=r"stage 't': a restore must give one of \['weights'\]"):
        StageCache(tmp_path / "b", records=records).run(
            "t",
            {},
            kept_adapters_stage([]),
            files=True,
            keep=("adapters.txt",),
            reproduce=("weights",),
            restore=rebuild([]),
        )


def test_a_recomputation_is_checked_on_the_keys_its_record_has():
    recorded = {"result": {"weights": "ab12", "probe": 0.5}, "machine": "AMD EPYC"}
    check_reproduced("finetune/t", recorded, {"weights": "ab12", "probe": 0.5, "new": 1}, ("weights", "new"))
    with pytest.raises(StageNotReproduced, match=r"weights = 'cd34', its record \(made on AMD EPYC\) 'ab12'"):
        check_reproduced("finetune/t", recorded, {"weights": "cd34", "probe": 0.5}, ("probe", "weights"))


def test_a_float32_probe_stored_as_float64_is_the_same_number_and_a_changed_one_is_not():
    first = {"probe": 0.9523487718887574, "weights": "ab12"}
    assert first_difference(first, {"probe": 0.9523488283157349, "weights": "ab12"}, ("probe", "weights")) is None
    assert first_difference(first, {"probe": 0.9351900219917297, "weights": "ab12"}, ("weights", "probe")) == "probe"
    assert first_difference({"weights": "ab12"}, {"probe": 0.1, "weights": "ab12"}, ("probe", "weights")) is None


def test_tensors_digest_sees_one_bit_and_names_but_not_order():
    weights = {"a": torch.ones(3, dtype=torch.bfloat16), "b": torch.arange(4.0)}
    assert tensors_digest(weights) == tensors_digest(dict(reversed(weights.items())))
    flipped = {**weights, "a": torch.tensor([1.0, 1.0, 1.0078125], dtype=torch.bfloat16)}  # next bf16 after 1
    assert tensors_digest(flipped) != tensors_digest(weights)
    assert tensors_digest({"c": weights["a"], "b": weights["b"]}) != tensors_digest(weights)
    assert tensors_digest({"s": torch.tensor(2.0)}) != tensors_digest({"s": torch.tensor(2.0, dtype=torch.float64)})
