"""The second round of issue 25's speed work changes no answer: record classes made from cached compiled
code are the classes ``dataclasses`` makes; the quick exit of ``cloudfit recommend`` still runs the atexit
handlers and keeps the exit code; the per-space start-up and log-sigma columns are the per-row ones."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent('''
    import builtins, dataclasses, inspect, sys
    from cloudfit import cache
    cache.compiled_records()
    compiled = []
    real = builtins.compile
    builtins.compile = lambda *a, **k: (compiled.append(a[0]), real(*a, **k))[1]
    from dataclasses import dataclass, field
    @dataclass(frozen=True)
    class Rec:
        """A record."""
        name: str
        n: int = 3
        tags: tuple = field(default=(), metadata={"omit_if_default": True})
    builtins.compile = real
    r = Rec("a", 4)
    print(len(compiled), repr(r), r == Rec("a", 4), hash(r) == hash(Rec("a", 4)),
          str(inspect.signature(Rec)), sorted(Rec.__init__.__annotations__.items()))
''')


def _child(home: Path) -> list[str]:
    env = dict(os.environ, CLOUDFIT_HOME=str(home), PYTHONPATH=str(REPO))
    env.pop("CLOUDFIT_CACHE", None)
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return p.stdout.split(" ", 1)


def test_record_classes_from_cached_code_are_the_same_classes(tmp_path):
    first = _child(tmp_path)
    assert int(first[0]) > 0  # compiled and stored at exit
    assert list((tmp_path / "cache" / "code").glob("*.pickle"))
    again = _child(tmp_path)
    assert int(again[0]) == 0  # read back: nothing compiled
    assert again[1] == first[1]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    plain = subprocess.run([sys.executable, "-c", CHILD.replace("cache.compiled_records()", "")], capture_output=True,
                           text=True, env=env, check=True).stdout.split(" ", 1)
    assert plain[1] == first[1]  # what dataclasses makes without the cache: the same repr, eq, hash, signature
    assert "('n', <class 'int'>)" in first[1]  # real types: no inherited `from __future__ import annotations`


def test_a_damaged_code_table_is_compiled_again(tmp_path):
    _child(tmp_path)
    for p in (tmp_path / "cache" / "code").glob("*.pickle"):
        p.write_bytes(b"\x80\x05garbage")
    out = _child(tmp_path)
    assert int(out[0]) > 0


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CLOUDFIT_HOME=str(home), PYTHONPATH=str(REPO), COLUMNS="160")
    return subprocess.run([sys.executable, "-m", "cloudfit", "recommend", *args], capture_output=True, text=True,
                          env=env)


def test_recommend_exits_quickly_with_its_output_exit_code_and_atexit_handlers(tmp_path):
    ok = _cli(tmp_path, "--model", "resnet50", "--samples", "3e7", "--deadline", "12h", "--max-nodes", "2",
              "--accelerators", "T4,L4", "--out", str(tmp_path / "plan.json"))
    assert ok.returncode == 0, ok.stderr
    assert "Why #1:" in ok.stdout and ok.stdout.rstrip().splitlines()[-1].startswith("Plan written to")
    assert (tmp_path / "plan.json").exists()
    assert list((tmp_path / "cache" / "code").glob("*.pickle"))  # stored by an atexit handler
    bad = _cli(tmp_path, "--model", "bert-large", "--samples", "1e8", "--budget", "5", "--accelerators", "T4")
    assert bad.returncode == 3 and bad.stderr.startswith("cloudfit: error: ") and bad.stdout == ""
    usage = _cli(tmp_path, "--model", "resnet50", "--samples", "1e7", "--top", "0", "--deadline", "1h")
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1


def test_the_whole_space_pass_from_group_inputs_is_the_per_row_pass():
    """``Space._assess`` with the price groups reads each group's inputs once (``spot.assess_groups``): the same
    numbers, column for column, as pricing every candidate on its own."""
    from dataclasses import fields

    from cloudfit import catalog
    from cloudfit.plan.planner import load_workload_profile
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    for kw in (dict(max_nodes=8), dict(max_nodes=4, spot="only", regions=["us-*"])):
        w = make_workload(model="resnet50", samples=3e7, deadline="12h", **kw)
        s = build_space(w, load_workload_profile(w), catalog.load())
        assert s.price_groups is not None and len(s.price_groups[0]) < len(s)
        for deadline in (12.0, 2.0, None):
            a, b = s._assess(deadline, slice(None), s.price_groups), s._assess(deadline, np.arange(len(s)))
            for f in fields(a):
                assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), (kw, deadline, f.name)
