"""Write notebooks/*.ipynb from the cells below, outputs cleared (``python scripts/build_notebooks.py``).

The notebooks are committed without outputs; tests/test_notebooks.py executes each one.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]

SETUP = """\
import os, tempfile
from pathlib import Path
# Everything this notebook writes goes to a scratch folder (set CLOUDFIT_NOTEBOOK_OUT to keep it).
OUT = Path(os.environ.get("CLOUDFIT_NOTEBOOK_OUT") or tempfile.mkdtemp(prefix="cloudfit-nb-"))
OUT.mkdir(parents=True, exist_ok=True)
import pandas as pd
pd.set_option("display.width", 160); pd.set_option("display.max_columns", 20)
%matplotlib inline"""

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_quickstart.ipynb": [
        ("md", "# cloudfit quick start\n\nLoad a shipped profile, predict its throughput on a few GPUs, then ask for "
               "the cheapest cluster under a deadline and the fastest under a budget."),
        ("code", SETUP),
        ("code", "import cloudfit\nfrom cloudfit.profiling.io import load_profile, resolve_profile\n"
                 "profile = load_profile(resolve_profile('resnet50'))\nprofile.stats_frame()"),
        ("md", "## Predict\n`cloudfit.predict` gives samples/s with a calibrated 10–90% band, for GPUs this profile "
               "never ran on."),
        ("code", "rows = []\nfor acc in ['T4', 'L4', 'V100', 'A100', 'H100']:\n    for count in (1, 8):\n"
                 "        p = cloudfit.predict(profile, acc, count, precision='fp16')\n"
                 "        rows.append({'accelerator': acc, 'count': count, 'fits': p.fits, 'samples/s': p.samples_per_second,\n"
                 "                     'low': p.low, 'high': p.high, 'basis': p.basis})\n"
                 "pd.DataFrame(rows).round(1)"),
        ("md", "## Recommend under a deadline\nResNet-50, 90 epochs of ImageNet, done within 24 hours at 90% confidence, "
               "as cheaply as possible (spot VMs allowed, preemption risk priced in)."),
        ("code", "from cloudfit.plan import recommend\nfrom cloudfit.workload import make_workload\n"
                 "w = make_workload(model='resnet50', epochs=90, dataset_size=1_281_167, deadline='24h')\n"
                 "plan = recommend(w)\nprint(plan.explanation)\nprint(plan.sensitivity)\nplan.to_frame().head(8)"),
        ("code", "from cloudfit import plot\nplot.pareto(plan)"),
        ("md", "## Recommend under a budget\nWith only a budget, cloudfit minimises time."),
        ("code", "wb = make_workload(model='resnet50', epochs=90, dataset_size=1_281_167, budget='100')\n"
                 "fast = recommend(wb)\nprint(fast.explanation)\nfast.to_frame().head(5)"),
        ("md", "## Keep the plan\n`plan.json` is all `cloudfit launch` needs."),
        ("code", "from cloudfit.plan.io import save_plan, load_plan\nsave_plan(plan, OUT / 'plan.json')\n"
                 "assert load_plan(OUT / 'plan.json').chosen.config == plan.chosen.config\n"
                 "print((OUT / 'plan.json').stat().st_size, 'bytes')"),
    ],
    "02_model_accuracy.ipynb": [
        ("md", "# How accurate is the performance model?\n\nLeave-one-accelerator-out cross-validation on the "
               "shipped public measurements (`data/measurements.csv`): for each accelerator, the model is refit "
               "without it and predicts its measurements — anchored on the same workload's measurement on another "
               "GPU, as a user's profile would be. Baselines: TFLOPS-ratio scaling, a CM-DARE-style SVR, the "
               "physics prior alone. (About 30 s.)"),
        ("code", SETUP),
        ("code", "from cloudfit.perf import evaluate\nreport = evaluate.run(schemes=('accelerator',), keep_records=True)\n"
                 "df = evaluate.to_frame(report, 'accelerator', 'anchored')\nlen(df)"),
        ("md", "## Error by held-out accelerator (MAPE, %)"),
        ("code", "methods = ['predicted', 'tflops-ratio', 'svr', 'prior']\n"
                 "ape = {m: ((df[m] - df.measured).abs() / df.measured) for m in methods}\n"
                 "table = pd.DataFrame({m: ape[m].groupby(df.group).mean() * 100 for m in methods})\n"
                 "table['n'] = df.groupby('group').size()\n"
                 "table.loc['all'] = [ape[m].mean() * 100 for m in methods] + [len(df)]\n"
                 "table.rename(columns={'predicted': 'cloudfit'}).round(1)"),
        ("md", "## Error by workload"),
        ("code", "(df.groupby('workload').ape.agg(['mean', 'median', 'size']).sort_values('mean', ascending=False)"
                 ".head(12).round(3))"),
        ("md", "## Band coverage\nThe share of held-out measurements inside the 10–90% band (target 75–85%)."),
        ("code", "inside = (df.measured >= df.low) & (df.measured <= df.high)\n"
                 "cov = inside.groupby([df.multi.map({False: 'single device', True: 'multi-device'})]).mean()\n"
                 "cov.round(2)"),
        ("code", "from cloudfit import plot\nplot.predicted_vs_measured(df, group='group', "
                 "title='Leave-one-accelerator-out, anchored')"),
        ("md", "## A model it has never seen: error by held-out model family\n"
               "Leave-one-model-out: every model family is held out in turn and predicted from its stats alone "
               "(FLOPs, parameters, gradient bytes) — no measurement of it anywhere. This part skips the inner "
               "cross-validation (so no bands, a few seconds); the full nested run, with anchored predictions "
               "and bands for this scheme too, is `cloudfit model eval` (results in `bench/RESULTS_perf.md`)."),
        ("code", "lomo = evaluate.run(schemes=('model',), inner=False, keep_records=True)\n"
                 "dm = evaluate.to_frame(lomo, 'model', 'stats-only')\n"
                 "ape_m = {m: ((dm[m] - dm.measured).abs() / dm.measured) for m in methods}\n"
                 "by_model = pd.DataFrame({m: ape_m[m].groupby(dm.group).mean() * 100 for m in methods})\n"
                 "by_model['n'] = dm.groupby('group').size()\n"
                 "by_model.loc['all (mean)'] = [ape_m[m].mean() * 100 for m in methods] + [len(dm)]\n"
                 "by_model.loc['all (median)'] = [ape_m[m].median() * 100 for m in methods] + [len(dm)]\n"
                 "by_model.rename(columns={'predicted': 'cloudfit'}).round(1)"),
        ("md", "Read the median row as well as the mean: a few families unlike anything in the training data "
               "(the tiny CIFAR ResNets of `t2t-resnet-cifar`, NCF) are far off from stats alone and dominate the "
               "mean. That is why a measurement of your own model matters — one GPU number, as in "
               "`04_profile_your_model`: anchored on it, the leave-one-model-out error falls to roughly 20% on "
               "one device and 35–40% on clusters (`bench/RESULTS_perf.md`, leave-one-model-out, anchored)."),
        ("code", "plot.predicted_vs_measured(dm, group='group', title='Leave-one-model-out, stats only (no band)')"),
    ],
    "03_tradeoffs.ipynb": [
        ("md", "# Trade-offs: deadlines, spot, regions\n\nBERT-large, 50 million samples. The configuration space is "
               "built once and re-priced for every question."),
        ("code", SETUP),
        ("code", "from cloudfit import explore, plot\nfrom cloudfit.plan import recommend\n"
                 "from cloudfit.workload import make_workload\n"
                 "w = make_workload(model='bert-large', samples=5e7, deadline='12h')\n"
                 "space = explore.space_for(w)\nprint(len(space), 'candidate clusters')"),
        ("md", "## What a deadline costs, spot versus on-demand"),
        ("code", "sweep = explore.deadline_sweep(w, [0.25, 0.5, 1, 2, 4, 8, 12, 24, 48, 96], space=space)\n"
                 "sweep.pivot(index='deadline_hours', columns='mode', values='cost_usd').round(2)"),
        ("code", "plot.cost_vs_deadline(sweep, chosen_deadline_hours=12)"),
        ("md", "## Spot risk\nEvery hardware config in its cheapest zone: spot is cheaper, but a multi-node spot "
               "cluster loses work whenever any node is revoked."),
        ("code", "plan = recommend(w, space=space)\nrisk = explore.risk_frame(w, space=space)\n"
                 "plot.spot_risk(risk, confidence=w.confidence, chosen=plan.chosen)"),
        ("md", "## Regions"),
        ("code", "explore.region_table(w, space=space)[['region', 'config', 'hours', 'cost_usd', 'p_on_time']].head(10).round(2)"),
        ("md", "## The Pareto front, and what a looser limit buys"),
        ("code", "print(plan.explanation)\nprint(plan.sensitivity)\nplot.pareto(plan)"),
        ("code", "wb = explore.with_limits(w, deadline_hours=None, budget_usd=300.0)\n"
                 "for b in (150.0, 300.0, 600.0):\n    p = recommend(explore.with_limits(wb, budget_usd=b), space=space)\n"
                 "    print(f'budget ${b:,.0f}: {p.chosen.config.label()} — {p.chosen.hours:.2f} h, ${p.chosen.cost_usd:,.2f}')"),
    ],
    "04_profile_your_model.ipynb": [
        ("md", "# Profile your own model\n\nA small model here on the CPU: write a factory, run a short real "
               "training loop, add a throughput someone measured on a GPU, and recommend."),
        ("code", SETUP),
        ("code", "src = '''\nimport torch\nfrom torch import nn\n\ndef factory():\n"
                 "    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 10))\n"
                 "    def make_batch(batch_size, device):\n"
                 "        return (torch.randn(batch_size, 3, 32, 32, device=device),\n"
                 "                torch.randint(0, 10, (batch_size,), device=device))\n"
                 "    return {'model': model, 'make_batch': make_batch, 'batch_size': 128}\n'''\n"
                 "(OUT / 'mynet.py').write_text(src)"),
        ("code", "from cloudfit.profiling import zoo\nfrom cloudfit.profiling.runner import profile_run\n"
                 "from cloudfit.profiling.stats import model_stats\nfrom cloudfit.profiling.io import save_profile\n"
                 "zm = zoo.load_user_model(str(OUT / 'mynet.py') + ':factory')\n"
                 "profile = profile_run(zm, steps=10, warmup=2, device='cpu', stats=model_stats(zm))\n"
                 "save_profile(profile, OUT / 'mynet.json')\nprofile.stats_frame()"),
        ("code", "profile.to_frame()[['accelerator', 'batch_size_per_device', 'samples_per_second', 'step_median_s', "
                 "'peak_memory_bytes']]"),
        ("md", "## Add a measurement from elsewhere\nSay a colleague measured 40,000 samples/s on one A100 at batch 128 "
               "in fp16. The performance model anchors on it for every other GPU."),
        ("code", "import cloudfit\nfrom cloudfit.profiling.io import add_measurement\nfrom cloudfit.types import Measurement\n"
                 "before = cloudfit.predict(profile, 'H100', 1, precision='fp16')\n"
                 "profile = add_measurement(OUT / 'mynet.json', Measurement(accelerator='A100', count=1, nodes=1,\n"
                 "    batch_size_per_device=128, precision='fp16', samples_per_second=40_000, source='reported'))\n"
                 "after = cloudfit.predict(profile, 'H100', 1, precision='fp16')\n"
                 "print(f'H100: {before.samples_per_second:,.0f} samples/s ({before.basis}) -> '\n"
                 "      f'{after.samples_per_second:,.0f} ({after.basis})')"),
        ("md", "## Recommend for it"),
        ("code", "from cloudfit.plan import recommend\nfrom cloudfit.workload import make_workload\n"
                 "w = make_workload(profile=str(OUT / 'mynet.json'), samples=2e9, deadline='6h', max_nodes=8)\n"
                 "plan = recommend(w)\nprint(plan.explanation)\nplan.to_frame().head(5)"),
        ("code", "from cloudfit import plot\nplot.pareto(plan)"),
    ],
    "05_llm_planning.ipynb": [
        ("md", "# Planning a large model: layouts × GPUs × cost\n\nLlama-3-70B, 1e11 tokens at 8,192 per sequence, on "
               "A3 Mega VMs (8 × H100, 1,800 Gbps between nodes). For every node count, cloudfit enumerates every "
               "parallel layout (FSDP / TP / PP / CP degrees, micro-batch, activation checkpointing), keeps those that "
               "fit in memory and times them with the step model — then prices the fastest. (A few seconds.)"),
        ("code", SETUP),
        ("code", "import numpy as np\nfrom cloudfit import catalog\nfrom cloudfit.llm import space as lsp, zoo\n"
                 "from cloudfit.llm.stats import token_stats\n"
                 "shape, st = zoo.get('llama3-70b'), token_stats(zoo.get('llama3-70b'), 8192)\n"
                 "off = min((o for o in catalog.load().offerings if o.machine_type == 'a3-megagpu-8g'), "
                 "key=lambda o: o.price_per_hour)\n"
                 "hw = lsp.HardwareShape('H100-MEGA', 8, lsp.node_network_gbps(off.machine_type, off.accelerator, 8, off.vcpus), 8, 80.0)\n"
                 "batch = lsp.default_global_batch(8192)\n"
                 "best = lsp.search_catalog(st, shape, [hw], 32, global_batch=batch)\n"
                 "fsdp = lsp.search_catalog(st, shape, [hw], 32, global_batch=batch, constraints={'tp': 1, 'pp': 1, 'cp': 1})\n"
                 "rows = []\nfor n in range(1, 33):\n"
                 "    for name, r in (('best', best), ('FSDP only', fsdp)):\n"
                 "        tps = r.tokens_per_second[0, n - 1]\n"
                 "        if tps > 0:\n"
                 "            hours = 1e11 / tps / 3600\n"
                 "            rows.append({'nodes': n, 'GPUs': 8 * n, 'search': name, 'layout': r.layout(0, n).describe(),\n"
                 "                         'tokens/s': tps, 'MFU': r.mfu[0, n - 1], 'GiB/GPU': r.memory_gib[0, n - 1],\n"
                 "                         'days': hours / 24, 'cost $': hours * n * off.price_per_hour})\n"
                 "df = pd.DataFrame(rows)\nprint(off.machine_type, off.zone, f'${off.price_per_hour:,.2f}/h per node')\n"
                 "df[df.search == 'best'].round(2).head(32)"),
        ("md", "## What the layout buys\nThe fastest layout against pure FSDP (no tensor or pipeline parallelism) at each "
               "cluster size: throughput, and the on-demand cost of the whole run."),
        ("code", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(1, 2, figsize=(11, 4))\n"
                 "for name, g in df.groupby('search'):\n"
                 "    ax[0].plot(g['GPUs'], g['tokens/s'], marker='o', ms=3, label=name)\n"
                 "    ax[1].plot(g['GPUs'], g['cost $'], marker='o', ms=3, label=name)\n"
                 "ax[0].set(xlabel='GPUs', ylabel='tokens/s', title='llama3-70b on a3-megagpu-8g')\n"
                 "ax[1].set(xlabel='GPUs', ylabel='$ for 1e11 tokens (on-demand)')\nax[0].legend(); ax[1].legend(); fig.tight_layout()"),
        ("md", "## The ranking at one size\nThe ten fastest layouts that fit on 16 nodes (128 GPUs)."),
        ("code", "pd.DataFrame(lsp.rank_layouts(st, shape, hw, 16, global_batch=batch, top=10)).round(3)"),
        ("md", "## The plan\nThe whole recommendation over US regions, spot allowed, within 30 days: the cluster, its "
               "layout and why, checkpoints and restarts of a sharded job priced in."),
        ("code", "from cloudfit.plan.llm import LLMJob, recommend_llm\nfrom cloudfit.workload import make_workload\n"
                 "job = LLMJob(shape, 1e11, 8192)\n"
                 "w = make_workload(model='llama3-70b', samples=1e11 / 8192, deadline='30d', regions=['us-*'], precision='bf16')\n"
                 "plan = recommend_llm(w, job)\nprint(plan.explanation)\nprint(plan.layout['checkpoint'])\nplan.to_frame().head(5)"),
    ],
}


def build(name: str, cells: list[tuple[str, str]]):
    nb = new_notebook(cells=[new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells])
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding leaves unchanged cells unchanged
        cell["id"] = f"{Path(name).stem[:2]}-{i:02d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def main() -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(name, cells), out / name)
        print(f"wrote notebooks/{name}")


if __name__ == "__main__":
    main()
