"""Rank and world set-up for the training runtime: who this process is, its device, its process group."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class Ranks:
    """This process's place in the job (from torchrun's environment) and its device."""

    distributed: bool  # launched by torchrun (else one private single-rank group)
    rank: int
    world: int
    local_rank: int
    restart: int  # torchrun's elastic restart count
    device: Any = None  # torch.device, set by :func:`join`
    cuda: bool = False


def torchrun_env() -> tuple[bool, int, int, int, int]:
    """(launched by torchrun?, rank, world size, local rank, elastic restart count) from the environment."""
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    return (distributed, int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))


def join() -> Ranks:
    """Pick the device (this rank's GPU, else the CPU) and join the process group: torchrun's when
    launched by it, else a private single-rank one, so the same code path runs in one process."""
    import torch
    import torch.distributed as dist

    r = Ranks(*torchrun_env())
    r.cuda = torch.cuda.is_available()
    if r.cuda:
        torch.cuda.set_device(r.local_rank)
        r.device = torch.device("cuda", r.local_rank)
    else:
        r.device = torch.device("cpu")
    backend = "cpu:gloo,cuda:nccl" if r.cuda else "gloo"  # on GPUs, CPU-side collectives still go over gloo
    if not r.distributed:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group(backend, rank=0, world_size=1)
    else:
        dist.init_process_group(backend)
    return r


def leave(r: Ranks) -> None:
    """Leave the group once every rank is done. Under torchrun, exit at once: gloo's threads sometimes
    abort during interpreter teardown ("terminate called without an active exception"), which torchrun
    would count as a failed rank and restart; the work is saved, so skip the C++ static destructors."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    if r.distributed:
        exit_now(0)


def exit_now(code: int) -> None:
    """End this torchrun rank with ``code`` at once, skipping the interpreter's teardown (and the C++ static
    destructors), where gloo's threads sometimes abort: SIGABRT instead of ``code``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
