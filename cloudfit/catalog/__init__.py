"""Offerings, accelerator specs and prices: one wing for everything the catalog knows.

- ``loader``: the catalog file format: columns, reader (``load``) and writer (``write_catalog``)
- ``hardware``: accelerator specs and canonical names
- ``refresh``: re-price a catalog from the Cloud Billing API (written through ``loader``)
"""

from __future__ import annotations

from cloudfit.catalog.loader import COLUMNS, Catalog, catalog_csv, fingerprint, load, price_per_hour, write_catalog

__all__ = ["COLUMNS", "Catalog", "catalog_csv", "load", "price_per_hour", "write_catalog"]
