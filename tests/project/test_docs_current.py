"""The docs are current: the options tables are what the models say (tests/support/option_tables.py writes them:
make docs), and docs/index.md links every page."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.option_tables import COMMAND, pages, stale, table, updated


def test_every_options_table_in_the_docs_is_current() -> None:
    assert {p.name for p in pages(ROOT)} >= {"job-spec.md", "backends.md", "sagemaker.md", "azureml.md"}
    problems = stale(ROOT)
    assert problems == [], f"{problems}: run {COMMAND}"


def test_a_stale_table_is_found_and_written_anew_and_a_page_without_markers_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "sagemaker.md"
    shutil.copy(ROOT / "docs" / "sagemaker.md", page)
    page.write_text(page.read_text().replace("IAM role ARN", "The role"))
    (tmp_path / "docs" / "plain.md").write_text("# No tables\n")
    assert stale(tmp_path) == ["docs/sagemaker.md: the options of sagemaker are stale"]
    page.write_text(updated(page.read_text()))
    assert stale(tmp_path) == [] and [p.name for p in pages(tmp_path)] == ["sagemaker.md"]


def test_a_table_has_a_row_per_field_with_its_type_bounds_default_environment_and_description() -> None:
    rows = table("sagemaker").splitlines()
    assert rows[1] == "| option | type | default | description |"
    (region,) = [r for r in rows if r.startswith("| `sagemaker.region` |")]
    assert "(environment: `AWS_REGION`, `AWS_DEFAULT_REGION`)" in region
    assert "| `slurm.container.image` | str | required |" in table("slurm")
    assert "| `limits.max_restarts` | int, 0–100 | `0` |" in table("limits")
    assert "| `inputs.<name>.mode` | `download` \\| `mount` | `download` |" in table("inputs")


def test_an_unknown_section_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"no options section 'sagemkaer'; known: .*sagemaker"):
        table("sagemkaer")


def test_the_index_links_every_page() -> None:
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / target).resolve() for target in re.findall(r"\]\(([^)#:]+)", index.read_text())}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(p.relative_to(ROOT).as_posix() for p in pages - linked) == []
