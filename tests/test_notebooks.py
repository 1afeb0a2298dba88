"""Every notebook runs top to bottom on a fresh machine (CPU only), in a kernel of this interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_four_notebooks_are_there_and_committed_without_outputs():
    import nbformat

    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_model_accuracy.ipynb", "03_tradeoffs.ipynb",
                                           "04_profile_your_model.ipynb"]
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), p.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # The "python3" kernel spec runs `python`: make that this interpreter (the project's venv) even
    # when the venv is not on PATH, as in CI.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("CLOUDFIT_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = NotebookClient(nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any(o.get("output_type") in ("execute_result", "display_data") for o in outputs)
