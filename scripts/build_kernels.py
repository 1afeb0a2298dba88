"""Build ``data/kernels/neusight_kernels.csv.xz`` from NeuSight's per-kernel measurements.

    python scripts/build_kernels.py [NEUSIGHT_DATASET_DIR]

Reads NeuSight's ``dataset/`` folder (train/, test/ and train/collect/: GEMM/linear, batched matmul,
convolution, element-wise ops, layer norm, softmax; PyTorch 2.1, CUDA 12.1, fp32, one method on every
GPU), pools the rows of every file, drops duplicate (op, GPU, shape) rows (keeping the median latency),
and keeps a deterministic sample of at most ``CAP[op]`` shapes per (op, GPU), the *same* shapes on
every GPU where they were measured: shapes measured on more GPUs first (NeuSight's test split, measured on
all eight), then by a hash of the shape. Output columns:

    op, op_class, accelerator, b, m, n, k, flops, bytes, latency_us

``op_class``: ``gemm`` (linear, bmm: b × (m×k)·(k×n)), ``conv`` (as the implicit GEMM it runs: m = batch ×
output pixels, n = output channels, k = input channels × kernel area; b = 1), ``memory`` (element-wise,
layer norm, softmax over b × m fp32 elements; n, k empty). ``flops`` counts multiply-adds as 2; ``bytes``
is the fp32 traffic one pass must move (inputs read once, output written once). Deterministic: sorted
rows, fixed number format, xz with fixed settings. Standard library + pandas (for reading .xz CSVs).
"""

from __future__ import annotations

import hashlib
import io
import lzma
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "kernels" / "neusight_kernels.csv.xz"
DEFAULT_SRC = ROOT.parent / "shared" / "data" / "kernels_neusight" / "dataset"

#: NeuSight's CUDA device name → canonical name in cloudfit/catalog/hardware.py
DEVICES = {
    "Tesla P4": "P4",
    "Tesla P100-PCIE-16GB": "P100",
    "Tesla T4": "T4",
    "Tesla V100-PCIE-32GB": "V100",
    "NVIDIA A100-PCIE-40GB": "A100",
    "NVIDIA A100 80GB PCIe": "A100-80GB",
    "NVIDIA L4": "L4",
    "NVIDIA H100 80GB HBM3": "H100",
}
BINARY = ("add", "mul", "div", "pow")  # two tensors in, one out
UNARY = ("addu", "mulu", "divu", "powu", "relu", "tanh", "gelu", "ln", "softmax")  # one in, one out
CAP = {"linear": 1000, "bmm": 1000, "conv": 1200, **{o: 200 for o in BINARY + UNARY}}


def _rows(df):
    import math

    for r in df.itertuples(index=False):
        op = r.OPName
        dev = DEVICES.get(r.Device)
        if dev is None or op not in CAP:
            continue
        lat_us = float(r.Latency) * 1000.0  # NeuSight records milliseconds
        if not lat_us > 0:
            continue
        if op in ("linear", "bmm"):
            b, m, n, k = (int(getattr(r, c)) for c in ("B", "M", "N", "K"))
            flops = 2.0 * b * m * n * k
            byts = 4.0 * b * (m * k + k * n + m * n)
            yield op, "gemm", dev, b, m, n, k, flops, byts, lat_us
        elif op == "conv":
            bs, cin, cout, ks, size, stride, pad = (int(getattr(r, c)) for c in
                                                    ("B", "Input_Channel", "Output_Channel", "Kernel_Szie",
                                                     "Input_Size", "Stride", "Padding"))
            out = (size + 2 * pad - ks) // stride + 1
            if out <= 0:
                continue
            m, n, k = bs * out * out, cout, cin * ks * ks
            flops = 2.0 * m * n * k
            byts = 4.0 * (bs * cin * size * size + cout * cin * ks * ks + bs * cout * out * out)
            yield op, "conv", dev, 1, m, n, k, flops, byts, lat_us
        else:
            b, h = int(r.B), int(r.H)
            if not (isinstance(h, int) and not math.isnan(float(h))):
                continue
            el = float(b) * h
            ins = 2 if op in BINARY else 1
            flops = {"ln": 8.0, "softmax": 5.0, "gelu": 8.0, "tanh": 4.0, "pow": 4.0, "powu": 4.0}.get(op, 1.0) * el
            yield op, "memory", dev, b, h, "", "", flops, 4.0 * el * (ins + 1), lat_us


def main(argv: list[str]) -> int:
    import pandas as pd

    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SRC
    files = sorted(p for p in src.rglob("*.csv.xz") if "dims" not in p.parts)
    if not files:
        sys.stderr.write(f"no NeuSight kernel files under {src}\n")
        return 1
    lat: dict[tuple, list[float]] = {}
    meta: dict[tuple, tuple] = {}
    for f in files:
        df = pd.read_csv(f)
        if "H" not in df:
            df["H"] = 0
        for op, cls, dev, b, m, n, k, flops, byts, lat_us in _rows(df):
            key = (op, dev, b, m, n, k)
            lat.setdefault(key, []).append(lat_us)
            meta[key] = (cls, flops, byts)
    # the same shapes on every GPU: rank each op's shapes by how many GPUs measured them (NeuSight's test
    # split, measured on every GPU, first), then by a hash; keep the first CAP per GPU
    gpus_per_shape: dict[tuple, int] = {}
    for key in lat:
        shape = (key[0],) + key[2:]
        gpus_per_shape[shape] = gpus_per_shape.get(shape, 0) + 1

    def rank(key):
        shape = (key[0],) + key[2:]
        return -gpus_per_shape[shape], hashlib.sha256(repr(shape).encode()).hexdigest()

    by_op_dev: dict[tuple, list[tuple]] = {}
    for key in lat:
        by_op_dev.setdefault((key[0], key[1]), []).append(key)
    out = []
    for (op, dev), keys in sorted(by_op_dev.items()):
        for key in sorted(keys, key=rank)[:CAP[op]]:
            v = sorted(lat[key])
            med = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
            cls, flops, byts = meta[key]
            out.append((op, cls, dev) + key[2:] + (flops, byts, med))
    out.sort(key=lambda r: (r[1], r[0], r[2], str(r[3:7])))
    buf = io.StringIO()
    buf.write("op,op_class,accelerator,b,m,n,k,flops,bytes,latency_us\n")
    for r in out:
        buf.write(",".join([r[0], r[1], r[2], str(r[3]), str(r[4]), str(r[5]), str(r[6]),
                            f"{r[7]:.6g}", f"{r[8]:.6g}", f"{r[9]:.5g}"]) + "\n")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(lzma.compress(buf.getvalue().encode(), preset=9))
    sys.stderr.write(f"{len(out)} kernel rows from {len(files)} files → {OUT.relative_to(ROOT)} "
                     f"({OUT.stat().st_size // 1024} KiB)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
