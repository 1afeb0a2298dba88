"""cloudfit: pick the cloud cluster to train a deep-learning model on, then launch it.

The library never prints: it returns values and raises ``cloudfit.errors.CloudfitError``.
Heavy dependencies (torch, xgboost, optuna, google-cloud) are imported only where used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "predict"]


def __getattr__(name: str) -> Any:
    # ``cloudfit.predict`` without importing the performance model (numpy) on ``import cloudfit``.
    if name == "predict":
        from cloudfit.perf import predict

        return predict
    raise AttributeError(f"module 'cloudfit' has no attribute {name!r}")
