"""The GCP backend (Compute Engine), in three rooms:

- ``clients``: API clients, retries (transient errors only) and capacity-error classification
- ``bodies``: instance bodies, labels, metadata and the startup script (no network)
- ``cluster``: ``GcpExecutor`` — launch with fallbacks, supervise, recreate, tear down, ``down``
"""

from __future__ import annotations

from cloudfit.endpoints import ENV_PIP_SPEC, pip_spec, strip_credentials
from cloudfit.executors.gcp.bodies import (
    BOOT_DISK_GB, DEFAULT_IMAGE, LAUNCH_LABEL, N1_ACCELERATOR_TYPES, RDZV_PORT, NodeSpec, accelerator_type,
    node_name, render_startup_script, split_bucket,
)
from cloudfit.executors.gcp.clients import ENV_ENDPOINT, Clients, NotOfferedError, Retry, make_clients
from cloudfit.executors.gcp.cluster import GcpExecutor

__all__ = [
    "BOOT_DISK_GB", "DEFAULT_IMAGE", "ENV_ENDPOINT", "ENV_PIP_SPEC", "LAUNCH_LABEL", "N1_ACCELERATOR_TYPES",
    "RDZV_PORT", "Clients", "GcpExecutor", "NodeSpec", "NotOfferedError", "Retry", "accelerator_type", "make_clients",
    "node_name", "pip_spec", "render_startup_script", "split_bucket", "strip_credentials",
]
