"""The measurement table (rebuilt byte-identically), the deterministic fit, and the shipped calibration."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from cloudfit.llm import data, fit
from cloudfit.llm.predict import constants
from tests.conftest import REPO


def test_measurement_table_rebuilds_byte_identically(tmp_path):
    before = data.MEASUREMENTS.read_bytes()
    r = subprocess.run([sys.executable, "scripts/build_llm_measurements.py"], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert data.MEASUREMENTS.read_bytes() == before
    assert "1837 rows" in r.stderr


def test_table_covers_the_three_sources():
    t = data.table()
    src = set(t.column("source"))
    assert src == {"vtrain-multi", "vtrain-single", "megatron-bridge", "llm-foundry"}
    assert (t.measured > 0).all() and (t.gpus >= 2).all()


def test_fit_is_deterministic():
    t = data.table()
    sub = t.subset((t.column("source") == "llm-foundry") | (t.column("source") == "megatron-bridge"))
    a, b = fit.fit(sub), fit.fit(sub)
    assert a == b


def test_shipped_calibration_predicts_its_training_rows():
    t = data.table()
    src = t.column("source")
    p = data.predict_table(t, constants())["tokens_per_second"]
    ape = np.abs(p - t.measured) / t.measured
    for s in ("llm-foundry", "megatron-bridge", "vtrain-multi"):
        assert ape[src == s].mean() < 0.15, s
