"""cloudfit: pick the cloud cluster to train a deep-learning model on, then launch it.

The library never prints: it returns values and raises ``cloudfit.errors.CloudfitError``.
Heavy dependencies (torch, xgboost, optuna, google-cloud) are imported only where used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
