"""pyproject.toml: every package cloudfit imports is declared; the core stays light (issue 14 item 7).

Before: every dependency was mandatory (a 1.8 GB environment), and ``click``, ``requests``,
``google.auth`` and ``google.api_core`` were imported without being declared.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: import name → distribution(s) that provide it
PROVIDERS = {
    "yaml": {"pyyaml"}, "sklearn": {"scikit-learn"}, "xgboost": {"xgboost-cpu", "xgboost"},
    "google.auth": {"google-auth"}, "google.api_core": {"google-api-core"},
    "google.cloud.compute_v1": {"google-cloud-compute"}, "google.cloud.billing_v1": {"google-cloud-billing"},
    "sky": {"skypilot"},
}
HEAVY = {"torch", "transformers", "xgboost", "xgboost-cpu", "scikit-learn", "optuna", "pandas", "matplotlib",
         "google-cloud-compute", "google-cloud-billing"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower()


def _declared() -> tuple[set[str], set[str]]:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in meta["dependencies"]}
    extras = {_name(r) for reqs in meta["optional-dependencies"].values() for r in reqs}
    return core, core | extras


def _imports() -> set[str]:
    out = set()
    for path in (REPO / "cloudfit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module + ("." + node.names[0].name if node.module == "google.cloud" else "")]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                # a leading underscore: CPython's own modules (``_sha2`` is 3.12's, unknown to 3.11's list)
                if top in sys.stdlib_module_names or top.startswith("_") or top == "cloudfit":
                    continue
                out.add(".".join(n.split(".")[:3]) if top == "google" else top)
    return out


def test_every_directly_imported_package_is_declared():
    _, declared = _declared()
    missing = []
    for mod in sorted(_imports()):
        want = next((v for k, v in PROVIDERS.items() if mod == k or mod.startswith(k + ".")), {mod.lower()})
        if not want & declared:
            missing.append(f"{mod} ({' or '.join(sorted(want))})")
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_core_install_is_light_and_the_extras_cover_the_rest():
    core, _ = _declared()
    assert not core & HEAVY, core & HEAVY
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(meta) >= {"profile", "gcp", "fit", "plot", "all", "dev"}
    assert "cloudfit[profile,gcp,fit,plot]" in meta["all"]


def test_the_readme_installs_everything_for_the_tour_with_the_cpu_torch():
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- ci:install -->", 1)[1].split("```", 2)[1]
    assert "torch==2.13.0" in block and ".[all,dev]" in block


def test_the_training_vms_install_only_what_training_needs():
    import zipfile
    from io import BytesIO

    from cloudfit.executors.gcp.wheel import runtime_wheel

    name, data = runtime_wheel()
    z = zipfile.ZipFile(BytesIO(data))
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["numpy>=1.26", "transformers>=4.44; extra == 'hf'"]
    assert "cloudfit/train.py" in z.namelist() and not any(n.endswith("perf/model.json") for n in z.namelist())
