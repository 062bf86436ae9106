"""The tutorial notebook runs top to bottom (so it cannot rot), and its outputs include a rendered plot."""

from __future__ import annotations

import pytest

from tests.support.cli import ROOT

pytestmark = pytest.mark.slow


def test_tutorial_notebook_executes_and_shows_a_plot_and_the_accuracy() -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "tutorial.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "examples")}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "run.watch() drew a plot"
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    accuracy = float(text.split("final test accuracy: ")[1].split()[0])
    assert accuracy >= 0.9
    markdown = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert any("job.yml" in m for m in markdown) and any("CreateTrainingJob.json" in m for m in markdown)
