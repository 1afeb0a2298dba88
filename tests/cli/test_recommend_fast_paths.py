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


def test_a_space_read_back_needs_no_catalog_parse_and_the_fingerprint_is_loads(monkeypatch, tmp_path):
    import shutil

    from cloudfit import catalog
    from cloudfit.catalog import loader
    from cloudfit.plan import recommend
    from cloudfit.plan.io import plan_to_dict
    from cloudfit.resources import default_catalog
    from cloudfit.workload import make_workload

    own = tmp_path / "mine.csv"
    shutil.copy(default_catalog(), own)
    for path, clouds in ((None, None), (None, ["gcp", "aws", "lambda"]), (None, ["aws"]), (str(own), None),
                         (str(own), ["gcp"])):
        cat = catalog.load(path, clouds=clouds)
        assert catalog.fingerprint(path, clouds=clouds) == (cat.path, cat.digest)
    monkeypatch.setattr(loader, "_PARSED", {})
    w = make_workload(model="resnet50", samples=3e7, deadline="12h", max_nodes=2, accelerators=["T4", "L4"])
    first = plan_to_dict(recommend(w))
    parsed = []
    real = loader._parse_file
    monkeypatch.setattr(loader, "_PARSED", {})
    monkeypatch.setattr(loader, "_parse_file", lambda p: (parsed.append(p), real(p))[1])
    again = plan_to_dict(recommend(w))
    assert parsed == []  # read back: the catalog was hashed, not parsed
    for d in (first, again):
        d["provenance"].pop("created_at")
    assert again == first
    own.write_text(own.read_text().replace(",0.", ",0.0", 1))  # other bytes: another space (parsed, built)
    recommend(w, catalog=own)
    assert parsed
