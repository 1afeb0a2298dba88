"""Fixtures for executor tests: the fake Compute Engine server and executors wired to it."""

from __future__ import annotations

import time

import pytest

from tests.fakes.compute_server import FakeCompute

PROJECT = "test-project"


class FastClock:
    """The guard's clock running ``speed``× real time (the guard only needs a monotonic clock)."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) / self.speed)


@pytest.fixture
def fake():
    with FakeCompute(op_delay_s=0.02, simulate_job_s=0.6) as f:
        yield f


@pytest.fixture
def gcp(fake):
    """``gcp(**overrides)`` → a GcpExecutor talking to the fake with test timing."""
    from cloudfit.executors.gcp import GcpExecutor, Retry

    def make(**kw):
        opts = dict(project=PROJECT, endpoint=fake.endpoint, interval_s=0.1, grace_s=1.0, teardown_s=3.0,
                    provision_slack_s=5.0, insert_settle_s=1.0,
                    retry=Retry(base_s=0.005, cap_s=0.05))
        opts.update(kw)
        return GcpExecutor(**opts)

    return make


def run_startup(script: str, metadata: dict, work, cwd, env: dict | None = None):
    """Run a rendered GCP startup script for real on this machine as one node: a fake metadata server holding
    ``metadata``, ``work`` its work folder, no linger or shutdown, this venv's python first on PATH. Returns
    (CompletedProcess, the metadata server — its ``guest`` attributes are what the node reported)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.fakes.compute_server import FakeMetadata

    md = FakeMetadata(metadata)
    e = {**os.environ, "CLOUDFIT_METADATA_URL": md.url, "CLOUDFIT_WORK_DIR": str(work), "CLOUDFIT_LINGER_S": "0",
         "CLOUDFIT_NO_SHUTDOWN": "1", "CLOUDFIT_WATCH_S": "0.2",
         "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **(env or {})}
    try:
        p = subprocess.run(["bash", "-c", script], env=e, capture_output=True, text=True, timeout=120, cwd=str(cwd))
    finally:
        md.close()
    return p, md
