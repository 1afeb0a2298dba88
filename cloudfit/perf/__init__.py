"""The performance model: predict training samples/s for any accelerator × count × nodes, with a band.

Public API (numpy + standard library only at import and prediction time)::

    predict(profile, accelerator, count=1, nodes=1, *, precision=None, batch_size=None,
            machine_type=None, network_gbps=None, parallelism="allreduce") -> Prediction
    predict_many(profile, queries: Sequence[HardwareQuery]) -> PredictionTable
    memory_fits(profile, accelerator, batch_size, precision) -> (bool, reason)
    model_version() -> str

How it works: ``prior`` (roofline per op class, each class at the achieved fraction of peak of its average
kernel from the kernel-efficiency tables fitted on NeuSight's per-kernel measurements (``kernels``), + all-reduce
/ parameter-server communication, bounded by kernel launches and, with ``HardwareQuery.vcpus``, image decoding) ×
a learned correction (xgboost fitted by ``cloudfit model fit``, evaluated here as numpy trees),
anchored on the profile's own GPU measurements when it has any; the 10–90% band is conformal on
grouped cross-validation residuals, per regime and per workload novelty, and at least as wide as leave-one-
accelerator-out residuals for accelerators with no measured row (whose basis says "no measured rows,
spec-based"). Such an accelerator's prediction is carried from the measured accelerator nearest in spec by the
transition prior (``model._transition``: how much of each spec ratio moves between measured GPUs realised, fitted
with its pairs by ``cloudfit model fit``), kept within the shipped extrapolation and in spec order over the
catalog; its band is the band by distance (``model.generation_quantiles``: leave-one-generation-out residuals of that
carried path, by generation hops from the reference and a precision never measured on its family, fitted by
``cloudfit model fit``). ``cloudfit model eval`` reports the accuracy, including the kernel level.
"""

from __future__ import annotations

from cloudfit.perf.model import (
    HardwareQuery,
    PredictionTable,
    memory_fits,
    model_version,
    predict,
    predict_many,
)

__all__ = ["HardwareQuery", "PredictionTable", "memory_fits", "model_version", "predict", "predict_many"]
