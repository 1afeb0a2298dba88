"""Does a change to the recommender change any answer? Run `cloudfit recommend` on varied workloads
with the code before and after, against one snapshot of the performance model, and diff everything.

    git archive HEAD | tar -x -C /tmp/before-export     # the code before (git state untouched)
    python bench/recommend_equivalence.py /tmp/before-export cloudfit/plan/planner.py cloudfit/search ...

The "before" tree is this tree's ``cloudfit/`` with the named files (or folders) taken from the
export, so only they differ; both trees read a copy of this tree's ``cloudfit/perf/model.json``
(the model can be refitted meanwhile) through ``cloudfit.perf.model.model_path``. ``--perf-from-export``
takes ``cloudfit/perf`` and its model from the export in both trees instead (when this tree's
performance model is mid-change). ``--model-from-export``: the "before" tree reads the export's model.json, the
"after" tree this tree's (a refit and the code that reads it, compared whole). Each workload runs twice per tree — ``--json`` and the rich table
— each with ``--out plan.json``; stdout, stderr, the exit code and plan.json must be identical
(``created_at`` and the tree's own path aside). Exit code 1 if anything differs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = [
    "--model resnet50 --epochs 90 --dataset-size 1281167 --deadline 24h",  # the speed bench's workload
    "--model resnet50 --samples 5e7 --budget 100",
    "--model bert-large --samples 2e7 --deadline 12h",
    "--model gpt2 --samples 1e7 --budget 500 --no-spot",
    "--model transformer-base --samples 3e7 --deadline 6h --confidence 0.95",
    "--model vgg16 --samples 1e8 --budget 60",
    "--model resnet50 --samples 1e8 --deadline 24h --budget 300 --objective time",
    "--model bert-base --samples 3e7 --deadline 8h --spot-only",
    "--model gpt2-medium --samples 5e6 --deadline 48h --regions us-*",
    "--model resnet152 --samples 6e7 --deadline 12h --accelerators A100,H100",
    "--model mobilenet_v2 --samples 2e8 --deadline 4h --max-nodes 8",
    "--model ncf --samples 1e9 --budget 20 --objective cost",
    "--model resnet18 --samples 5e7 --deadline 2h --budget 50 --objective time",
    "--model resnet50 --samples 1e9 --deadline 10m --no-spot",
    "--model gnmt --samples 4e7 --deadline 24h --regions europe-west4,us-central1 --max-nodes 16",
    "--model inception_v3 --samples 5e7 --budget 200 --spot-only --objective time",
    "--model densenet121 --samples 3e7 --deadline 12h --max-nodes 1",
    "--model alexnet --samples 1e8 --deadline 3h --budget 40 --top 10",
    "--model bert-large --samples 1e8 --budget 5",  # infeasible: exit 3 and the relaxation message
    "--model resnet50 --samples 3e7 --deadline 24h --search bayes --trials 60 --seed 3",
    "--model ssd300 --samples 2e7 --deadline 30h --confidence 0.5 --max-nodes 32",
    "--model resnet50 --samples 1e10 --deadline 10m --no-spot",  # infeasible deadline
    "--model resnet50 --samples 1e8 --deadline 3h",  # a later deadline saves money
    "--model bert-large --samples 5e7 --deadline 90m --confidence 0.8",
    "--model vgg16 --samples 2e8 --budget 150 --objective time --max-nodes 16",
    "--model gpt2 --samples 3e7 --budget 400 --objective cost",
    "--model resnet101 --samples 1e8 --deadline 6h --no-spot --accelerators V100,T4,L4",
    # large models (token workloads: cluster and layout)
    "--model llama3-70b --tokens 1e12 --seq-len 8192 --deadline 30d",  # the speed bench's LLM workload
    "--model llama3-8b --tokens 1e11 --deadline 7d --accelerators H100 --layout cp=1,pp=1 --allow-outlier-prices",
    "--model llama3-8b --tokens 2e10 --budget 20000 --spot-only",
    "--model llama3-70b --tokens 2e8 --finetune lora --deadline 2d --top 8",
    "--model llama3-8b --tokens 1e11 --deadline 1h",  # infeasible: exit 3
    "--model llama3-8b --tokens 1e11 --deadline 7d --samples 5",  # bad usage: exit 2
]
DRIVER = r"""
import os, sys
from pathlib import Path
from cloudfit.cli.main import app
import cloudfit.cli.recommend  # as the CLI does, before anything imports numpy
import cloudfit.perf.model as pm
assert Path(pm.__file__).resolve().is_relative_to(Path(os.environ["EQ_TREE"]).resolve()), pm.__file__
pm.model_path = lambda: Path(os.environ["EQ_MODEL"])
from cloudfit.cli.main import run
run()  # the console script's entry point (sys.argv[1:] are the arguments), its way of exiting included
"""


def _tree(dst: Path, cloudfit: Path) -> Path:
    shutil.copytree(cloudfit, dst / "cloudfit", ignore=shutil.ignore_patterns("__pycache__"))
    for extra in ("catalogs", "profiles", "data", "pyproject.toml"):  # the shipped data, found next to the package
        if (REPO / extra).exists():
            os.symlink(REPO / extra, dst / extra)
    return dst


def _replace(tree: Path, src_root: Path, rel: str) -> None:
    dst, src = tree / rel, src_root / rel
    for parent in reversed(Path(rel).parents):  # a shipped-data folder is a link to this repo's: copy it first,
        link = tree / parent                     # or the replacement would overwrite the repo's own file
        if str(parent) != "." and link.is_symlink():
            target = link.resolve()
            link.unlink()
            shutil.copytree(target, link, ignore=shutil.ignore_patterns("__pycache__"))
    if dst.is_dir():
        shutil.rmtree(dst)
    elif dst.exists():
        dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    elif src.exists():
        shutil.copy(src, dst)


def run(tree: Path, args: list[str], out_dir: Path, model: Path) -> dict[str, tuple]:
    env = dict(os.environ, PYTHONPATH=str(tree), EQ_MODEL=str(model), EQ_TREE=str(tree), COLUMNS="160")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    res = {}
    for mode, extra in (("json", ["--json"]), ("table", [])):
        plan = out_dir / f"plan_{mode}.json"
        p = subprocess.run([sys.executable, "-c", DRIVER, "recommend", *args, *extra, "--out", str(plan)],
                           capture_output=True, text=True, env=env, cwd=str(out_dir))

        def norm(text: str) -> str:
            text = re.sub(r'"created_at": "[^"]*"', '"created_at": "X"', text).replace(str(plan), "PLAN")
            return text.replace(str(tree.resolve()), "TREE").replace(str(tree), "TREE")

        res[mode] = (p.returncode, norm(p.stdout), norm(p.stderr), norm(plan.read_text()) if plan.exists() else None)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path, help="a tree holding the code before (e.g. `git archive HEAD` extracted)")
    ap.add_argument("files", nargs="+", help="paths under the repository that the change touched")
    ap.add_argument("--perf-from-export", action="store_true", help="cloudfit/perf and its model.json from the export")
    ap.add_argument("--model-from-export", action="store_true", help="the before tree reads the export's model.json")
    ns = ap.parse_args()
    t0 = time.time()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before, after = _tree(tmp / "before", REPO / "cloudfit"), _tree(tmp / "after", REPO / "cloudfit")
        for rel in ns.files:
            _replace(before, ns.export, rel)
        model = tmp / "model.json"
        if ns.perf_from_export:
            for t in (before, after):
                _replace(t, ns.export, "cloudfit/perf")
            shutil.copy(ns.export / "cloudfit/perf/model.json", model)
        else:
            shutil.copy(REPO / "cloudfit/perf/model.json", model)
        model_before = model
        if ns.model_from_export:
            model_before = tmp / "model_before.json"
            shutil.copy(ns.export / "cloudfit/perf/model.json", model_before)
        for k, case in enumerate(CASES):
            args = case.split()
            outs = []
            for tree, m in ((before, model_before), (after, model)):
                d = tmp / "runs" / f"{tree.name}{k}"
                d.mkdir(parents=True)
                outs.append(run(tree, args, d, m))
            diffs = []
            for mode in ("json", "table"):
                for what, x, y in zip(("exit code", "stdout", "stderr", "plan.json"), outs[0][mode], outs[1][mode]):
                    if x != y:
                        diffs.append(f"  {mode} {what}:\n" + "".join(list(difflib.unified_diff(
                            str(x).splitlines(True), str(y).splitlines(True), "before", "after", n=1))[:30]))
            code, out = outs[0]["json"][:2]
            info = f"exit {code}"
            if code == 0:
                chosen = json.loads(out)["plan"]["chosen"]
                info += f", chosen ${chosen['cost_usd']:,.2f} / {chosen['hours']:.2f} h"
            print(f"{'same' if not diffs else 'DIFFERENT'}: {case} ({info})")
            for d in diffs:
                print(d)
            bad += bool(diffs)
    print(f"{len(CASES) - bad}/{len(CASES)} workloads identical (JSON, table, plan.json, stderr, exit code); "
          f"{time.time() - t0:.0f} s")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
