"""TOFU-20: the forget split's authors plus retain authors, disjoint, with TOFU's sizes, read by the QA loaders."""

from __future__ import annotations

import json

import pytest
from helpers import SHARED_DATA

from trustlit.data.qa import load_qa_split
from trustlit.data.tofu_subsets import QA_PER_AUTHOR, authors_of, write_tofu_subset

TOFU_DIR = SHARED_DATA / "tofu"


def records(directory, name):
    return [json.loads(line) for line in (directory / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def tofu20(tmp_path_factory):
    output = tmp_path_factory.mktemp("tofu20") / "tofu"
    return write_tofu_subset(TOFU_DIR, output, "forget01", 18), output


def test_tofu20_authors_and_sizes(tofu20):
    subset = tofu20[0]
    assert subset.forget_authors == (198, 199)  # forget01: TOFU's last two authors
    assert subset.retain_authors == tuple(range(18))
    assert set(subset.forget_authors).isdisjoint(subset.retain_authors)
    assert subset.counts == {
        "full.json": 400,
        "retain.json": 360,
        "forget01.json": 40,
        "forget01_perturbed.json": 40,
        "retain_perturbed.json": 360,
    }


def test_tofu20_files_hold_exactly_the_kept_authors(tofu20):
    output = tofu20[1]
    full = records(TOFU_DIR, "full.json")
    target, retain = records(output, "full.json"), records(output, "retain.json")
    target_authors, retain_authors = authors_of(target, full, "target"), authors_of(retain, full, "retain")
    assert sorted(set(target_authors)) == [*range(18), 198, 199]
    assert all(target_authors.count(a) == QA_PER_AUTHOR for a in set(target_authors))
    assert set(retain_authors) == set(range(18))
    forget_questions = {r["question"] for r in records(output, "forget01.json")}
    assert forget_questions <= {r["question"] for r in target}
    assert forget_questions.isdisjoint(r["question"] for r in retain)
    evaluated = authors_of(records(output, "retain_perturbed.json"), full, "retain_perturbed")
    assert set(evaluated) == set(range(18))
    assert len(load_qa_split(str(output), "retain_perturbed")) == 360  # the loaders read the subset as a source


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="forget_split must be one of"):
        write_tofu_subset(TOFU_DIR, tmp_path / "x", "forget02")
    with pytest.raises(ValueError, match=r"num_retain_authors must be in \[1, 20\]"):
        write_tofu_subset(TOFU_DIR, tmp_path / "x", "forget01", 21)
    assert not (tmp_path / "x").exists()
    with pytest.raises(FileNotFoundError, match="TOFU file not found"):
        write_tofu_subset(tmp_path, tmp_path / "y")
