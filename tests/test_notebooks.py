"""The three notebooks run top to bottom on their small settings (issue 9, acceptance 4)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ["retry_storms", "timeout_tuning", "capacity_planning", "calibration"]
MAX_BYTES = 1_000_000


def _parameters_cell(nb: nbformat.NotebookNode) -> int:
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    return tagged[0]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, tmp_path):
    # imported here, not at collection: nbformat imports jsonschema, whose optional
    # rfc3987-syntax (installed with jupyterlab) builds its grammar on import, ~1.5 CPU-s
    # in every xdist worker that collects this file but never runs it
    import nbformat
    from nbclient import NotebookClient

    path = NOTEBOOKS / f"{name}.ipynb"
    assert path.stat().st_size < MAX_BYTES, "committed outputs must stay under 1 MB"
    nb = nbformat.read(path, as_version=4)
    i = _parameters_cell(nb)
    # papermill-style injection right after the parameters cell: the small size
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell('SIZE = "small"'))
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs = []
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "the story is told with plots"
    assert not list(tmp_path.glob("results")), "notebooks write under a temporary folder"
