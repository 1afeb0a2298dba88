"""What a staged (asynchronous) DCP save costs the training loop vs a blocking one, on CPU gloo ranks.

    python bench/dcp_async_save.py [--mb 300] [--ranks 2] [--repeats 3] [--dir /tmp/...]

Each rank holds its shard of ``--mb`` MB of fp32 state (a DTensor sharded over the ranks, as FSDP2 keeps it);
the script times ``dcp.save`` (the loop waits for the whole write) and ``dcp.async_save`` (the loop waits
only until the state is staged to host memory; the write continues in a thread), and the async save's
time to durable. Local disk only: on a VM the write would go to the local disk or a bucket (slower), which
makes the blocking/staged gap larger, not smaller. Results: bench/RESULTS_checkpoint.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time


def _rank(rank: int, world: int, args, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    n = int(args.mb * 1e6 / 4 / 8)  # 8 tensors of fp32 adding up to --mb MB
    state = {f"w{i}": distribute_tensor(torch.randn(n), mesh, [Shard(0)]) for i in range(8)}
    rows = []
    for r in range(args.repeats):
        d = os.path.join(args.dir, f"r{r}")
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=os.path.join(d, "blocking"))
        dist.barrier()
        blocking = time.perf_counter() - t0
        dist.barrier()
        t0 = time.perf_counter()
        fut = dcp.async_save(state, checkpoint_id=os.path.join(d, "staged"))
        staged = time.perf_counter() - t0  # the loop may step again from here
        fut.result()
        dist.barrier()
        durable = time.perf_counter() - t0
        rows.append({"blocking_s": blocking, "staged_s": staged, "async_durable_s": durable})
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(rows, fh)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=300.0, help="state size in MB, all ranks together")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    import socket

    import torch.multiprocessing as mp

    own = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="dcp-bench-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(args.dir, "rows.json")
    try:
        mp.start_processes(_rank, args=(args.ranks, args, port, out), nprocs=args.ranks, start_method="spawn")
        with open(out) as fh:
            rows = json.load(fh)
    finally:
        if own:
            shutil.rmtree(args.dir, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(json.dumps({"mb": args.mb, "ranks": args.ranks, "repeats": args.repeats, "median": med, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
