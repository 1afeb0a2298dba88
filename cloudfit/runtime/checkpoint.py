"""The checkpoint folder, the same for every family: ``torch.distributed.checkpoint`` (DCP).

``CKPT/step-<9 digits>/`` holds DCP's ``.metadata`` and one or more ``__<rank>_<i>.distcp`` shard
files per rank, and ``COMPLETE.json`` — written by rank 0 only after every rank's files are in place,
and signed (``cloudfit.runtime.integrity``: an HMAC of every file, and of the marker). A folder without
the marker is a torn attempt and is ignored; the ``keep`` newest complete ones are kept. A resume
loads the newest complete one, whatever layout or world size wrote it (DCP re-shards on load), once
its signature verifies; one that does not verify is refused.

With ``--local-checkpoint-dir`` each rank writes its shard files to local disk and a background
thread copies them into the shared folder; the ranks agree at a later step that every upload is
done, and only then is the marker written (no rank waits on a FUSE-mounted bucket).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from cloudfit.atomic import atomic_open
from cloudfit.runtime import integrity
from cloudfit.runtime.family import BadInput, Job

MARKER = "COMPLETE.json"
METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d{9})$")


def step_dir(folder: Path, step: int) -> Path:
    return folder / f"step-{step:09d}"


def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint folder that has its completion marker, newest first."""
    if not folder.is_dir():
        return []
    out = []
    for n in os.listdir(folder):
        m = _STEP_DIR.match(n)
        if m and (folder / n / MARKER).is_file():
            out.append((int(m.group(1)), folder / n))
    return sorted(out, reverse=True)


def prune(folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest complete checkpoints; remove older ones and stale incomplete folders."""
    done = complete_checkpoints(folder)
    if not done:
        return
    for _, path in done[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    newest = done[0][0]
    for n in os.listdir(folder):
        m = _STEP_DIR.match(n)
        if m and int(m.group(1)) < newest and not (folder / n / MARKER).is_file():
            shutil.rmtree(folder / n, ignore_errors=True)


def _mine(folder: Path, rank: int) -> list[str]:
    """The files of a DCP folder this rank wrote (rank 0 also writes the metadata)."""
    names = sorted(n for n in os.listdir(folder) if n.startswith(f"__{rank}_"))
    return names + ([METADATA] if rank == 0 else [])


class _Pending:
    """A checkpoint written by every rank, its marker not yet written."""

    def __init__(self, step: int, marker: dict[str, Any], t0: float) -> None:
        self.step, self.marker, self.t0 = step, marker, t0
        self.digests: dict[str, str] = {}
        self.thread: threading.Thread | None = None
        self.error: str | None = None

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class Store:
    """This job's checkpoints, as every rank writes and reads them."""

    def __init__(self, args: Any, ranks: Any, key: bytes) -> None:
        self.shared = Path(args.checkpoint_dir)
        local = Path(args.local_checkpoint_dir) if args.local_checkpoint_dir else None
        self.local = None if local is None or local.resolve() == self.shared.resolve() else local
        self.ranks, self.key, self.keep = ranks, key, args.keep
        self.pending: _Pending | None = None
        self.upload_error: str | None = None
        self.last_write_s: float | None = None  # seconds the newest checkpoint took to become durable
        if ranks.rank == 0:
            self.shared.mkdir(parents=True, exist_ok=True)

    # ---- writing
    def save(self, job: Job, step: int, marker: dict[str, Any]) -> None:
        """Every rank writes its shards of ``step``; the marker follows in :meth:`seal` (now, without
        a local folder; once the uploads are done, with one)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        t0 = time.perf_counter()
        where = step_dir(self.local or self.shared, step)
        if self.ranks.rank == 0 or (self.local is not None and self.ranks.local_rank == 0):
            shutil.rmtree(where, ignore_errors=True)  # a torn earlier attempt at the same step
        if self.local is not None and self.ranks.rank == 0:
            shutil.rmtree(step_dir(self.shared, step), ignore_errors=True)
        dist.barrier()
        msd, osd = get_state_dict(job.model, job.optimizer)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(where))
        dist.barrier()  # every rank's shards and the metadata are written
        self.pending = p = _Pending(step, marker, t0)
        if self.local is None:
            p.digests = {n: integrity.file_digest(self.key, where / n) for n in _mine(where, self.ranks.rank)}
        else:
            p.thread = threading.Thread(target=self._upload, args=(p, where), name="cloudfit-upload", daemon=True)
            p.thread.start()

    def _upload(self, p: _Pending, local: Path) -> None:
        dest = step_dir(self.shared, p.step)
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for name in _mine(local, self.ranks.rank):
                p.digests[name] = integrity.file_digest(self.key, local / name)
                tmp = dest / f".{name}.part"
                shutil.copyfile(local / name, tmp)
                os.replace(tmp, dest / name)
                (local / name).unlink(missing_ok=True)
            try:
                local.rmdir()  # the last rank of this machine to finish removes the folder
            except OSError:
                pass
        except OSError as e:  # reported in progress; the marker is not written, so nobody resumes from it
            p.error = f"upload of step {p.step} failed: {e}"

    def busy(self) -> bool:
        return self.pending is not None and self.pending.busy()

    def seal(self, eval_loss: float | None = None) -> int | None:
        """Collective: gather every rank's file digests; rank 0 writes the signed marker and prunes.
        Returns the step sealed (None when nothing was pending or an upload failed)."""
        import torch.distributed as dist

        p, self.pending = self.pending, None
        if p is None:
            return None
        if p.thread is not None:
            p.thread.join()
        gathered: list[Any] = [None] * self.ranks.world
        dist.all_gather_object(gathered, (p.digests, p.error))
        errors = [e for _, e in gathered if e]
        if errors:
            self.upload_error = errors[0]
            return None
        if self.ranks.rank == 0:
            files = {k: v for digests, _ in gathered for k, v in digests.items()}
            marker = integrity.sign(self.key, {**p.marker, "eval_loss": eval_loss, "time": time.time()}, files)
            with atomic_open(step_dir(self.shared, p.step) / MARKER) as fh:  # whole or absent
                json.dump(marker, fh)
            prune(self.shared, self.keep)
        dist.barrier()
        self.last_write_s = time.perf_counter() - p.t0
        return p.step

    def size(self, step: int) -> int:
        folder = step_dir(self.shared, step)
        return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())

    # ---- reading
    def newest(self) -> tuple[int, Path, dict[str, Any]] | None:
        """Collective: the newest complete checkpoint, its marker verified, or None. Rank 0 chooses
        (and verifies the marker and the folder's file list); every rank learns its choice."""
        import torch.distributed as dist

        choice: list[Any] = [None]
        if self.ranks.rank == 0:
            done = complete_checkpoints(self.shared)
            try:
                choice = [(done[0][0], str(done[0][1]), integrity.verified_marker(self.key, done[0][1] / MARKER))
                          if done else None]
            except BadInput as e:
                choice = [str(e)]
        dist.broadcast_object_list(choice, src=0)
        if isinstance(choice[0], str):
            raise integrity.CheckpointRefused(choice[0])
        if choice[0] is None:
            return None
        step, path, marker = choice[0]
        return step, Path(path), marker

    def load(self, job: Job, path: Path, marker: dict[str, Any]) -> None:
        """Collective: verify every file of ``path`` (each rank the metadata it unpickles and its
        share of the shards), then load it into the job's model and optimizer (re-sharded)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        if not (path / MARKER).is_file():
            raise BadInput(f"rank {self.ranks.rank} cannot see {path}: the checkpoint folder must be shared by all ranks")
        names = sorted(marker["files"])
        share = [METADATA] + [n for i, n in enumerate(names) if i % self.ranks.world == self.ranks.rank and n != METADATA]
        bad: list[Any] = [None] * self.ranks.world
        dist.all_gather_object(bad, integrity.verify_files(self.key, path, marker["files"], share))
        if any(bad):
            raise integrity.CheckpointRefused(f"checkpoint file {next(b for b in bad if b)}: "
                                              "signature does not verify: refused (nothing in it was loaded)")
        msd, osd = get_state_dict(job.model, job.optimizer)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(job.model, job.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
