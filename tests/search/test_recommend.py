

def test_the_prediction_basis_names_each_kind_once_and_the_unmeasured_gpus_together():
    from types import SimpleNamespace

    from cloudfit.search.space import _basis

    rows = ("stats-only", "stats-only; L4: no measured rows, spec-based", "stats-only; B200: no measured rows, spec-based",
            "anchored on A100 x8 (+2 more)", "anchored on A100 x8 (+2 more); L4: no measured rows, spec-based")
    assert _basis(SimpleNamespace(basis=rows)) == ("anchored on A100 x8 (+ the profile's other runs), stats-only; "
                                                   "no measured rows, spec-based: B200, L4")
    # a profile with runs on two chips: each named once, not once per phrasing
    rows = ("anchored on H100×1 bs256 bf16", "anchored on H100×1 bs256 bf16 (+1 more)", "anchored on H200×1 bs256 bf16",
            "anchored on H100×1 bs256 bf16 (+1 more); L4: no measured rows, spec-based")
    assert _basis(SimpleNamespace(basis=rows)) == ("anchored on H100×1 bs256 bf16, H200×1 bs256 bf16 (each chip on "
                                                   "its own runs, the others on all); no measured rows, spec-based: L4")
    assert _basis(SimpleNamespace(basis=("stats-only",) * 3)) == "stats-only"
