"""A short, real training run: warm-up, then timed optimizer steps on one synthetic batch.

Each step is zero-grad → forward + loss (under autocast for fp16/bf16) → backward (loss-scaled for
fp16) → optimizer step, CUDA-synchronised on a GPU. The batch is made once, before timing, so data
generation is not measured (a real input pipeline overlaps it). One more step after the timed ones is
timed op by op to split op time by class (its per-op overhead stays out of the step times). Peak memory is the CUDA allocator's peak
on a GPU and the process's peak resident set (sampled every 20 ms) on a CPU.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable

from cloudfit.errors import ProfileError
from cloudfit.profiling.device import canonical_device_name, device_name, select_device
from cloudfit.profiling.opclass import classify
from cloudfit.errors import one_line
from cloudfit.profiling.zoo import ZooModel
from cloudfit.types import OP_CLASSES, Measurement, ModelStats, Profile, StepTime

if TYPE_CHECKING:  # pragma: no cover
    import torch

DEFAULT_STEPS = 10
DEFAULT_WARMUP = 2
RUN_PRECISIONS = ("fp32", "fp16", "bf16")


def check_run_options(*, steps: int, warmup: int, precision: str, device: str, batch_size: int | None) -> "torch.device":
    """Validate run options before anything slow happens; returns the selected device."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ProfileError(f"steps must be a positive integer, got {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ProfileError(f"warm-up steps must be a non-negative integer, got {warmup!r}")
    if precision not in RUN_PRECISIONS:
        raise ProfileError(f"precision must be one of {', '.join(RUN_PRECISIONS)}, got {precision!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ProfileError(f"batch size must be a positive integer, got {batch_size!r}")
    return select_device(device)


def resolve_batch_size(zm: ZooModel, device_type: str, batch_size: int | None) -> int:
    """The batch to time: the one asked for, else the zoo's CPU default on a CPU, else its per-GPU default."""
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ProfileError(f"batch size must be a positive integer, got {batch_size!r}")
        return batch_size
    if device_type == "cpu" and zm.cpu_batch_size:
        return zm.cpu_batch_size
    return zm.default_batch_size


def backward_and_step(loss, opt, scaler=None) -> None:
    """Backward and optimizer step, through the fp16 loss scaler when there is one (shared with the trainer)."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def profile_run(
    zm: ZooModel,
    *,
    batch_size: int | None = None,
    steps: int = DEFAULT_STEPS,
    warmup: int = DEFAULT_WARMUP,
    device: str = "auto",
    precision: str = "fp32",
    progress: Callable[[int, int], None] | None = None,
    stats: ModelStats | None = None,
    op_breakdown: bool = True,
) -> Profile:
    """Profile ``zm``: its stats (at its per-GPU batch) plus one measurement of ``steps`` timed steps.

    ``batch_size`` defaults to the zoo's CPU batch on a CPU and its per-GPU batch on a GPU; the
    measurement records the batch actually run. ``progress(done, total)`` is called after every step.
    """
    dev = check_run_options(steps=steps, warmup=warmup, precision=precision, device=device, batch_size=batch_size)
    b = resolve_batch_size(zm, dev.type, batch_size)
    if stats is None:
        from cloudfit.profiling.stats import model_stats

        stats = model_stats(zm)
    raw_name = device_name(dev)
    try:
        times, peak, share = _timed_run(zm, dev, b, steps, warmup, precision, progress, op_breakdown)
    except ProfileError:
        raise
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, MemoryError) or "out of memory" in str(e).lower() or "can't allocate" in str(e).lower():
            raise ProfileError(f"{zm.name} ran out of memory on {raw_name} at batch {b}; try a smaller --batch-size") from e
        raise ProfileError(f"{zm.name} failed on {raw_name} at batch {b}: {type(e).__name__}: {one_line(e)}") from e
    import torch

    median = _percentile(times, 50)
    threads = ""
    if dev.type == "cpu":
        # Other processes on the machine slow a CPU run; say how busy it was.
        load = f", load average {os.getloadavg()[0]:.2f} at the end" if hasattr(os, "getloadavg") else ""
        threads = f"{torch.get_num_threads()} CPU threads{load}; "
    m = Measurement(
        accelerator=canonical_device_name(raw_name),
        count=1,
        nodes=1,
        batch_size_per_device=b,
        precision=precision,
        samples_per_second=b / median,
        step_time_s=StepTime(median=median, p90=_percentile(times, 90)),
        source="measured",
        note=f"{threads}{steps} timed steps after {warmup} warm-up; synthetic data; optimizer {zm.optimizer}",
        peak_memory_bytes=peak,
        op_time_share=share,
        device_name=raw_name,
        torch_version=torch.__version__,
        host=socket.gethostname(),
        measured_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )
    return Profile(model=zm.name, stats=stats, measurements=(m,))


def _percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) without importing numpy."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _optimizer(zm: ZooModel, params):
    import torch

    # A small learning rate keeps random-data training finite (NaNs and denormals change step time).
    if zm.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9)


def _timed_run(zm, dev, b, steps, warmup, precision, progress, op_breakdown):
    import torch

    torch.manual_seed(0)
    model = zm.model.to(dev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ProfileError(f"{zm.name} has no trainable parameters")
    opt = _optimizer(zm, params)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(dev.type) if precision == "fp16" else None
    cuda = dev.type == "cuda"
    batch = zm.make_batch(b, dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast(dev.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with ctx:
            loss = zm.loss(model, batch)
        backward_and_step(loss, opt, scaler)
        if cuda:
            torch.cuda.synchronize(dev)

    total = warmup + steps + (1 if op_breakdown else 0)
    done = 0
    share = None
    times: list[float] = []
    flush = torch.set_flush_denormal(True) if dev.type == "cpu" else False  # denormals slow CPUs 10-100×
    memory = _PeakMemory(dev)

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    try:
        with memory:
            for _ in range(warmup):
                step()
                tick()
            for _ in range(steps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
                tick()
            if op_breakdown:  # one more, untimed step, op by op (per-op timing adds overhead)
                share = _op_time_share(step, cuda)
                tick()
    finally:
        if flush:
            torch.set_flush_denormal(False)
        opt.zero_grad(set_to_none=True)
    return times, memory.peak, share


def _op_time_share(step: Callable[[], None], cuda: bool) -> dict[str, float] | None:
    """Run ``step`` once more and split its ATen op time by op class (shares summing to 1).

    CPU: a dispatch mode times each ATen op as it runs (CPU ops are synchronous; Python overhead
    between ops is left out). CUDA: ``torch.profiler``'s device time of the kernels each ATen op
    launched itself (only ``aten::`` events are summed, so kernels are not counted twice).
    """
    per_class = _cuda_op_times(step) if cuda else _cpu_op_times(step)
    total = sum(per_class.values())
    if total <= 0:
        return None
    return {k: v / total for k, v in per_class.items()}


def _cpu_op_times(step: Callable[[], None]) -> dict[str, float]:
    from torch.utils._python_dispatch import TorchDispatchMode

    per_class = dict.fromkeys(OP_CLASSES, 0.0)

    class Timer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            per_class[classify(func._overloadpacket.__name__)] += time.perf_counter() - t0
            return out

    with Timer():
        step()
    return per_class


def _cuda_op_times(step: Callable[[], None]) -> dict[str, float]:  # pragma: no cover - needs a GPU
    from torch.profiler import ProfilerActivity, profile

    per_class = dict.fromkeys(OP_CLASSES, 0.0)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
    for evt in prof.key_averages():
        if evt.key.startswith("aten::"):
            t = getattr(evt, "self_device_time_total", None)
            if t is None:
                t = getattr(evt, "self_cuda_time_total", 0.0)
            per_class[classify(evt.key)] += float(t)
    return per_class


class _PeakMemory:
    """Peak bytes during the block: the CUDA allocator's peak, or the sampled process RSS on a CPU."""

    def __init__(self, dev: "torch.device") -> None:
        self.dev = dev
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rss = 0

    def __enter__(self):
        import torch

        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
            return self
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a dependency
            return self
        proc = psutil.Process()

        def sample() -> None:
            while not self._stop.is_set():
                self._rss = max(self._rss, proc.memory_info().rss)
                self._stop.wait(0.02)

        self._thread = threading.Thread(target=sample, name="cloudfit-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.dev.type == "cuda":
            self.peak = int(torch.cuda.max_memory_allocated(self.dev))
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.peak = int(self._rss) or None
        else:  # pragma: no cover
            import resource

            self.peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
