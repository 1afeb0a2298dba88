"""The ``trainer`` fixture: each registered family's trainer in the test's folder."""

from __future__ import annotations

import pytest

from cloudfit import runtime
from tests.runtime.ranks import Trainer


@pytest.fixture(params=sorted(runtime.FAMILIES))
def trainer(request, tmp_path) -> Trainer:
    return Trainer(request.param, tmp_path)
