"""Offerings, accelerator specs and prices: one wing for everything the catalog knows.

- ``loader``: read and validate offering catalogs (``catalogs/gcp.csv``)
- ``hardware``: accelerator specs and canonical names
- ``refresh``: rebuild a catalog from the Cloud Billing API and write it
"""

from __future__ import annotations

from cloudfit.catalog.loader import COLUMNS, Catalog, load, price_per_hour

__all__ = ["COLUMNS", "Catalog", "load", "price_per_hour"]
