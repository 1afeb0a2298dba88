"""Every notebook runs top to bottom on a fresh machine (CPU only), in a kernel of this interpreter,
draws its pictures and writes nothing outside its scratch folder."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# PNG outputs each notebook must show (one per plot cell)
FIGURES = {"01_quickstart": 1, "02_model_accuracy": 2, "03_tradeoffs": 3, "04_profile_your_model": 1,
           "05_llm_planning": 1}


def test_the_notebooks_are_there_and_committed_without_outputs():
    import nbformat

    assert [p.stem for p in NOTEBOOKS] == list(FIGURES)
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in nb.cells if c.cell_type == "code"), p.name


def _this_python_kernel():
    """A KernelManager whose kernel is ``sys.executable -m ipykernel_launcher``.

    Not the "python3" spec looked up on the Jupyter path: a user-level spec of that name may point
    at another interpreter, and CI must not install kernels.
    """
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())  # argv[0] is sys.executable

    return KernelManager(kernel_name="cloudfit-test", kernel_spec_manager=ThisPython())


def _repo_files() -> set[Path]:
    """Files where a careless notebook would write: the repo's top level and its data folders."""
    out = {p for p in REPO.iterdir() if p.is_file()}
    for d in ("notebooks", "profiles", "catalogs", "data"):
        out |= {p for p in (REPO / d).rglob("*") if ".ipynb_checkpoints" not in p.parts}
    return out


#: Notebooks that take more than ~20 s on two cores (02 refits the model's evaluation: ~3 minutes).
SLOW = {"02_model_accuracy", "04_profile_your_model"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p for p in NOTEBOOKS],
                         ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch, _isolated_home):
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell

    out, work = tmp_path / "out", tmp_path / "cwd"
    out.mkdir()
    work.mkdir()
    monkeypatch.setenv("CLOUDFIT_NOTEBOOK_OUT", str(out))
    # IPython's profile and the kernel's connection file go to scratch too
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    probe = new_code_cell("import os; print(os.environ.get('CLOUDFIT_HOME'))")
    nb.cells.append(probe)
    before = _repo_files()

    client = NotebookClient(nb, km=_this_python_kernel(), timeout=180, resources={"metadata": {"path": str(work)}})
    import signal

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        client.execute()
    finally:  # the kernel manager's event loop resets SIGTERM to the default: give the suite its handler back
        for s, h in handlers.items():
            signal.signal(s, h)

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == FIGURES[path.stem]
    # the kernel sees the test's isolated $CLOUDFIT_HOME, and nothing landed in the repository
    assert probe.outputs[0]["text"].strip() == str(_isolated_home)
    assert _repo_files() == before
    assert not list(work.iterdir()), "a notebook wrote into its working directory"
