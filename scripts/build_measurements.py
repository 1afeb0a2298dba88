#!/usr/bin/env python
"""Rebuild ``data/measurements.csv`` (and ``data/workload_stats.json``) from ``data/raw/``.

    python scripts/build_measurements.py            # table + workload stats (needs torch)
    python scripts/build_measurements.py --no-stats # table only (stdlib)

Every row is one public measurement of training throughput tied to an accelerator in
``cloudfit/catalog/hardware.py`` and to a workload whose stats ``cloudfit.perf.workloads`` can compute.
Rows that cannot be tied are counted by reason in ``data/PROVENANCE.md`` (printed here too).
The output is deterministic: inputs are read in sorted order, numbers are written with a fixed
format, rows are sorted.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "data" / "raw"

COLUMNS = [
    "source", "ref", "workload", "model_group", "accelerator", "count", "nodes", "batch_per_device",
    "precision", "parallelism", "ps_count", "network_gbps", "ps_network_gbps", "intra_gbps",
    "framework", "samples_per_second", "note",
]

skipped: Counter = Counter()


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _row(**kw) -> dict:
    r = {c: "" for c in COLUMNS}
    r.update({k: (v if isinstance(v, str) else _fmt(v) if isinstance(v, float) else str(v)) for k, v in kw.items()})
    return r


# --------------------------------------------------------------------------------------------
# CM-DARE (TensorFlow 1.10 + Tensor2Tensor, parameter server, CIFAR-10, batch 128 per worker)

# Model name in CM-DARE's files → (workload, family). ``customN`` are the paper's own CNNs, whose
# architectures are not published, so they are skipped.
_CMDARE_MODELS = {
    "Res15": "t2t-resnet-cifar15", "res15": "t2t-resnet-cifar15",
    "Res32": "t2t-resnet-cifar32", "res32": "t2t-resnet-cifar32",
    "shake16": "t2t-shakeshake26-2x16d", "shakesmall": "t2t-shakeshake26-2x32d",
    "shake48": "t2t-shakeshake26-2x48d", "shakemid": "t2t-shakeshake26-2x64d",
    "shake80": "t2t-shakeshake26-2x80d", "shakebig": "t2t-shakeshake26-2x96d", "shakesbig": "t2t-shakeshake26-2x96d",
    "shake small 32d": "t2t-shakeshake32-2x32d", "shake mid 32d": "t2t-shakeshake32-2x64d",
}
_CMDARE_GPU = {"k80": "K80", "p100": "P100", "K80": "K80", "P100": "P100"}
# Workers: n1-highmem-8 (8 vCPUs → 16 Gbps on N1); parameter servers: 4 vCPUs → 8 Gbps (CM-DARE README).
_CMDARE_WORKER_GBPS, _CMDARE_PS_GBPS = 16.0, 8.0


def _family(workload: str) -> str:
    for prefix, fam in (("t2t-resnet-cifar", "t2t-resnet-cifar"), ("t2t-shakeshake", "t2t-shakeshake")):
        if workload.startswith(prefix):
            return fam
    return _FAMILY.get(workload, workload)


_FAMILY = {
    "gavel-resnet18-cifar10": "resnet18", "resnet50": "resnet50", "resnet152": "resnet152",
    "inception_v3": "inception_v3", "vgg16": "vgg16", "alexnet": "alexnet",
    "gavel-transformer-multi30k": "transformer", "gavel-lstm-wikitext2": "lstm-lm",
    "gavel-recoder-ml20m": "recoder", "gavel-cyclegan": "cyclegan", "megatron-gpt-opt350m": "gpt",
    "bert-base": "bert", "bert-large": "bert", "ncf": "ncf",
}


def cmdare() -> list[dict]:
    rows = []
    base = RAW / "cmdare"
    # Single worker, one PS: the speed data behind the paper's regression (13 samples per model).
    for fname in ("speed_data/0latency_k80_new.csv", "speed_data/0latency_p100_new2.csv"):
        groups: dict[tuple[str, str], list[float]] = {}
        with open(base / fname, newline="") as f:
            for r in csv.DictReader(f):
                groups.setdefault((r["GPU (temp)"], r["Model (temp)"]), []).append(float(r["Speed (steps/sec)"]))
        for (gpu, model), speeds in sorted(groups.items()):
            wl = _CMDARE_MODELS.get(model)
            if wl is None:
                skipped["cmdare: CM-DARE's own custom CNN (architecture not published)"] += 1
                continue
            rows.append(_row(source="cmdare", ref=f"{fname}:{gpu}/{model}", workload=wl, model_group=_family(wl),
                             accelerator=_CMDARE_GPU[gpu], count=1, nodes=1, batch_per_device=128, precision="fp32",
                             parallelism="ps", ps_count=1, network_gbps=_CMDARE_WORKER_GBPS,
                             ps_network_gbps=_CMDARE_PS_GBPS, framework="tensorflow",
                             samples_per_second=128 * statistics.median(speeds),
                             note=f"median of {len(speeds)} runs, global steps/s x 128"))
    # Cluster size 1..8 workers, 1 or 2 PS: TensorBoard global_step/sec traces.
    scs = base / "speed_and_cluster_size"
    for folder in sorted(p for p in scs.iterdir() if p.is_dir()):
        gpu = "P100" if folder.name.startswith("p100") else "K80"
        n_ps = 2 if folder.name.endswith("ps2") else 1
        for run in sorted(p for p in folder.iterdir() if p.is_dir()):
            name = run.name
            workers = int(name.rsplit("worker", 1)[1])
            stem = name.rsplit("worker", 1)[0].replace("ps2", "")
            for tag in ("k80", "p100", "80", "100"):
                if stem.endswith(tag):
                    stem = stem[: -len(tag)]
                    break
            wl = _CMDARE_MODELS.get(stem)
            if wl is None:
                skipped[f"cmdare: unknown model folder {name}"] += 1
                continue
            with open(run / "run_.-tag-global_step_sec.csv", newline="") as f:
                vals = [float(r["Value"]) for r in csv.DictReader(f)]
            vals = vals[len(vals) // 5:]  # drop warm-up: the first 20% of the trace
            rows.append(_row(source="cmdare", ref=f"speed_and_cluster_size/{folder.name}/{name}", workload=wl,
                             model_group=_family(wl), accelerator=gpu, count=1, nodes=workers, batch_per_device=128,
                             precision="fp32", parallelism="ps", ps_count=n_ps, network_gbps=_CMDARE_WORKER_GBPS,
                             ps_network_gbps=_CMDARE_PS_GBPS, framework="tensorflow",
                             samples_per_second=128 * statistics.median(vals),
                             note=f"median global steps/s over {len(vals)} samples after 20% warm-up, x 128"))
    return rows


# --------------------------------------------------------------------------------------------
# Gavel (PyTorch, DistributedDataParallel over NCCL; fp32)

_GAVEL_JOBS = {
    "ResNet-18": "gavel-resnet18-cifar10",
    "ResNet-50": "resnet50",
    "Transformer": "gavel-transformer-multi30k",
    "LM": "gavel-lstm-wikitext2",
    "Recommendation": "gavel-recoder-ml20m",
    "CycleGAN": "gavel-cyclegan",
}
_GAVEL_FIXED_BATCH = {"CycleGAN": 1}
# Unconsolidated jobs run one worker per server; Gavel's servers are cloud VMs with ~10 Gbps NICs
# (assumption: the paper does not state the NIC speed).
_GAVEL_NETWORK_GBPS = 10.0


def gavel() -> list[dict]:
    rows = []
    with open(RAW / "gavel" / "physical_cluster_throughputs_isolated_flat.csv", newline="") as f:
        for r in csv.DictReader(f):
            job = r["job_type"]
            name = job.split(" (")[0]
            wl = _GAVEL_JOBS.get(name)
            if wl is None:
                skipped["gavel: A3C (CPU-bound asynchronous RL; throughput is set by CPU actors, not the GPU)"] += 1
                continue
            batch = int(job.split("batch size ")[1].rstrip(")")) if "batch size" in job else _GAVEL_FIXED_BATCH[name]
            steps = float(r["isolated_throughput_steps_per_sec"])
            scale = int(r["scale_factor"])
            if steps <= 0:
                skipped["gavel: throughput recorded as 0 (run failed, e.g. out of memory)"] += 1
                continue
            consolidated = r["placement"] == "consolidated"
            if scale == 1 and not consolidated:
                skipped["gavel: 1-GPU 'unconsolidated' duplicate of the consolidated row"] += 1
                continue
            rows.append(_row(source="gavel", ref=f"{r['gpu_type']}/{r['placement']}/{job}/x{scale}", workload=wl,
                             model_group=_family(wl), accelerator=r["gpu_type"].upper(),
                             count=scale if consolidated else 1, nodes=1 if consolidated else scale,
                             batch_per_device=batch, precision="fp32",
                             parallelism="allreduce", network_gbps=_GAVEL_NETWORK_GBPS if not consolidated else "",
                             framework="pytorch", samples_per_second=steps * batch,
                             note="worker steps/s x batch per worker"))
    return rows


# --------------------------------------------------------------------------------------------
# tf_cnn_benchmarks, May 2017 (TensorFlow 1.1, fp32, ImageNet shapes)

_TF_MODELS = {"InceptionV3": "inception_v3", "ResNet-50": "resnet50", "ResNet-152": "resnet152",
              "VGG16": "vgg16", "AlexNet": "alexnet"}
# variable_update per platform and model, as the source document lists them.
_TF_UPDATE = {
    "NVIDIA DGX-1": {"InceptionV3": "ps", "ResNet-50": "ps", "ResNet-152": "ps", "AlexNet": "allreduce", "VGG16": "allreduce"},
    "Google Compute Engine": {m: "ps" for m in _TF_MODELS},
    "Amazon EC2": {"InceptionV3": "ps", "ResNet-50": "allreduce", "ResNet-152": "allreduce", "AlexNet": "ps", "VGG16": "ps"},
}
# Parameter servers per node count for the distributed runs ("equal numbers of parameter servers and
# worker servers … except InceptionV3: 8 instances / 6 PS; ResNet-50 (batch 32): 8 / 4; ResNet-152: 8 / 4").
_TF_DIST_PS_AT_8 = {("InceptionV3", 64): 6, ("ResNet-50", 32): 4, ("ResNet-152", 32): 4}
# DGX-1 P100s are the SXM2 part with 4 NVLink links (160 GB/s bidirectional per GPU); at the 40%
# NCCL bus efficiency hardware.intra_node_gbps uses for NVLink → 64 GB/s. Cloud K80s sit on PCIe gen3.
_DGX1_NVLINK_GBPS = 0.4 * 160.0
_P2_NETWORK_GBPS = 10.0  # p2.8xlarge: "10 Gigabit" networking


def tf_cnn() -> list[dict]:
    rows = []
    with open(RAW / "tf_cnn_benchmarks_2017" / "tf_cnn_benchmarks_2017_images_per_sec.csv", newline="") as f:
        for r in csv.DictReader(f):
            if not r["images_per_sec"]:
                skipped["tf_cnn_benchmarks: N/A in the source (input pipeline saturated)"] += 1
                continue
            if r["data"] != "synthetic":
                # Real-data rows add disk/input-pipeline limits no model stat describes; keep the synthetic ones.
                skipped["tf_cnn_benchmarks: real-data duplicate of a synthetic row (input-pipeline bound)"] += 1
                continue
            model = r["model"]
            wl = _TF_MODELS[model]
            n = int(r["num_gpus"])
            batch = int(r["batch_size_per_gpu"])
            platform = r["platform"]
            if platform.startswith("Amazon EC2 distributed"):
                nodes, count = max(1, n // 8), min(n, 8)
                ps = _TF_DIST_PS_AT_8.get((model, batch), nodes) if nodes == 8 else nodes
                par, net, ps_net = "ps", _P2_NETWORK_GBPS, _P2_NETWORK_GBPS
                intra = ""
                plat = "aws-distributed"
            else:
                nodes, count = 1, n
                par = _TF_UPDATE[platform][model]
                ps = 1 if par == "ps" else ""
                net = ""
                # PS on the host CPU: gradients cross PCIe gen3 (≈12 GB/s usable → 96 Gbit/s) to one place.
                ps_net = 96.0 if par == "ps" else ""
                intra = _fmt(_DGX1_NVLINK_GBPS) if platform == "NVIDIA DGX-1" else ""
                plat = {"NVIDIA DGX-1": "dgx1", "Google Compute Engine": "gce", "Amazon EC2": "aws"}[platform]
            # DGX-1's P100s are the SXM2 module (hardware.BOARD_OF), not the PCIe card
            acc = "P100-SXM2" if platform == "NVIDIA DGX-1" and r["gpu"] == "P100" else r["gpu"]
            rows.append(_row(source="tf_cnn_benchmarks", ref=f"{plat}/{model}/bs{batch}/x{n}", workload=wl,
                             model_group=_family(wl), accelerator=acc, count=count, nodes=nodes,
                             batch_per_device=batch, precision="fp32", parallelism=par, ps_count=ps,
                             network_gbps=net, ps_network_gbps=ps_net, intra_gbps=intra, framework="tensorflow",
                             samples_per_second=float(r["images_per_sec"]), note=f"{platform}, synthetic data"))
    return rows


# --------------------------------------------------------------------------------------------
# Sailor per-layer profiles (Megatron-DeepSpeed; OPT-350M shape: GPT, hidden 1024, 24 layers, seq 2048)

_SAILOR_GPU = {"A100-40": "A100", "A100-80": "A100-80GB", "GH-96": "GH200", "V100-16": "V100"}


def sailor() -> list[dict]:
    rows = []
    base = RAW / "sailor" / "profiles" / "OPT-350"
    for gdir in sorted(p for p in base.iterdir() if p.is_dir()):
        acc = _SAILOR_GPU[gdir.name]
        prof = json.loads((gdir / "profile.json").read_text())
        for mbs in sorted(prof, key=int):
            for tp in sorted(prof[mbs], key=int):
                layers = prof[mbs][tp]
                if tp != "1":
                    skipped["sailor: tensor-parallel profile (tp > 1; cloudfit models data parallelism)"] += 1
                    continue
                update = sum(v[2] for v in layers.values())
                if update <= 0:
                    skipped["sailor: profile without optimizer-update times (A100-80)"] += 1
                    continue
                step = sum(v[0] + v[1] + v[2] for v in layers.values())
                rows.append(_row(source="sailor", ref=f"profiles/OPT-350/{gdir.name}/mbs{mbs}", workload="megatron-gpt-opt350m",
                                 model_group=_family("megatron-gpt-opt350m"), accelerator=acc, count=1, nodes=1,
                                 batch_per_device=int(mbs), precision="tf32", parallelism="allreduce",
                                 framework="megatron", samples_per_second=int(mbs) / step,
                                 note=f"sum of {len(layers)} layers' fwd+bwd+update s"))
    return rows


# --------------------------------------------------------------------------------------------
# Lambda's PyTorch benchmarks (NVIDIA DeepLearningExamples in NGC pytorch:22.09; one node, 1–8 GPUs)

_LAMBDA_MODELS = {"resnet50": "resnet50", "bert_base_squad": "bert-base", "bert_large_squad": "bert-large", "ncf": "ncf"}
_LAMBDA_SKIP_MODELS = {
    "ssd": "DeepLearningExamples' SSD300 has a ResNet-50 backbone (the zoo's SSD300 is VGG-16)",
    "gnmt": "reported in tokens/s; tokens per sentence pair are not recorded",
    "tacotron2": "no definition in the zoo", "waveglow": "no definition in the zoo",
    "transformerxlbase": "no definition in the zoo", "transformerxllarge": "no definition in the zoo",
}
PCIE4_RING_GBPS = 0.75 * 31.5  # the rule hardware.intra_node_gbps applies to PCIe gen4


def _lambda_system(name: str) -> tuple[str, int, str, str] | None:
    """(accelerator, GPUs, batch-table row, intra-node override) for a system name, or None to skip."""
    m = re.search(r"(?:^|\s)([248])x", name)
    n = int(m.group(1)) if m else 1
    if name.startswith(("Dell ", "SMC ", "1CC ")):
        return None  # third-party repeats of Lambda's H100 SXM5 runs (their NCF numbers are implausible)
    if name.startswith("LambdaCloud") and "V100 16GB" in name:
        return "V100", n, name, ""
    if name == "LambdaCloud A100 40GB PCIe":
        return "A100", 1, "Lambda Cloud A100 40GB PCIe", ""
    if "A100 80GB PCIe" in name:
        return "A100-80GB-PCIe", n, name, _fmt(PCIE4_RING_GBPS) if n > 1 else ""
    if "A100 80GB SXM4" in name:
        return "A100-80GB", n, name, ""
    if name.startswith("LambdaCloud") and "H100" in name:
        return None  # Lambda Cloud repeats of configurations measured on Lambda's own servers
    if "H100 80GB PCIe Gen5" in name:
        return "H100-PCIe", n, name, ""
    if "H100 80GB SXM5" in name:
        # The batch table predates the SXM5 runs; Lambda's configs pick batch by GPU memory, and the
        # 80 GB H100 PCIe rows give it.
        return "H100", n, name.replace("SXM5", "PCIe Gen5"), ""
    return None


def lambda_benchmarks() -> list[dict]:
    rows = []
    base = RAW / "lambda"
    for prec_file, precision in (("fp16", "fp16"), ("fp32", "tf32")):
        with open(base / f"pytorch-train-bs-{prec_file}.csv", newline="") as f:
            batch = {r["name_gpu"]: r for r in csv.DictReader(f)}
        with open(base / f"pytorch-train-throughput-{prec_file}.csv", newline="") as f:
            for r in csv.DictReader(f):
                name = r["name_gpu"]
                sysinfo = _lambda_system(name)
                for col in sorted(_LAMBDA_MODELS) + sorted(_LAMBDA_SKIP_MODELS):
                    if col in _LAMBDA_SKIP_MODELS:
                        skipped[f"lambda: {col} ({_LAMBDA_SKIP_MODELS[col]})"] += 1
                        continue
                    if sysinfo is None:
                        skipped["lambda: system not in hardware.py (RTX/Quadro/A10 without a batch size) or a "
                                "duplicate run (LambdaCloud H100, Dell/SMC/1CC H100 with implausible NCF values)"] += 1
                        continue
                    acc, n, bs_row, intra = sysinfo
                    value = float(r[col])
                    if value <= 0:
                        skipped["lambda: no result (0) in the source"] += 1
                        continue
                    bs_total = int(float(batch[bs_row][col]))
                    wl = _LAMBDA_MODELS[col]
                    rows.append(_row(source="lambda", ref=f"{prec_file}/{name}/{col}", workload=wl,
                                     model_group=_family(wl), accelerator=acc, count=n, nodes=1,
                                     batch_per_device=bs_total // n, precision=precision, parallelism="allreduce",
                                     intra_gbps=intra, framework="pytorch", samples_per_second=value,
                                     note=f"{name}; DeepLearningExamples {col} ({'AMP' if prec_file == 'fp16' else 'TF32/FP32'})"))
    return rows


def build_rows() -> list[dict]:
    rows = cmdare() + gavel() + tf_cnn() + sailor() + lambda_benchmarks()
    rows.sort(key=lambda r: (r["source"], r["ref"]))
    return rows


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-stats", action="store_true", help="only the measurement table (no torch needed)")
    ap.add_argument("--out", type=Path, default=REPO / "data")
    args = ap.parse_args(argv)
    rows = build_rows()
    write_atomic(args.out / "measurements.csv", to_csv(rows))
    print(f"{len(rows)} rows → {args.out / 'measurements.csv'}")
    for src, n in sorted(Counter(r["source"] for r in rows).items()):
        print(f"  {src}: {n}")
    print("skipped:")
    for why, n in sorted(skipped.items()):
        print(f"  {n:4d}  {why}")
    if not args.no_stats:
        sys.path.insert(0, str(REPO))
        from cloudfit.perf import workloads

        stats = workloads.compute_all(sorted({(r["workload"], int(r["batch_per_device"])) for r in rows}))
        write_atomic(args.out / "workload_stats.json", json.dumps(stats, indent=1, sort_keys=True) + "\n")
        print(f"{len(stats['workloads'])} (workload, batch) stats → {args.out / 'workload_stats.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
