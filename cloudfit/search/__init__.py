"""Searchers over a workload's configuration space.

``exhaustive`` (the default and the oracle) prices every candidate in one vectorised pass;
``bayes`` runs a seeded optuna study over (shape, region, nodes, spot) for spaces too large to
enumerate. Both implement ``Searcher.search(space, problem) -> SearchResult`` and are held to the
same contract (tests/search/test_contract.py).

Search only ranks: it imports no executor, no plan and launches nothing (tests/test_layering.py).
Active search — paid probe runs through an executor — is ``cloudfit.active``, above ``plan``.
"""

from __future__ import annotations

from typing import Protocol

from cloudfit.errors import UsageError
from cloudfit.search.problem import Problem, SearchResult


class Searcher(Protocol):
    name: str

    def search(self, space, problem: Problem) -> SearchResult:  # pragma: no cover - protocol
        ...


def get_searcher(name: str, **options) -> Searcher:
    """``"exhaustive"`` or ``"bayes"`` (options: n_trials, seed, sampler)."""
    if name == "exhaustive":
        from cloudfit.search.exhaustive import ExhaustiveSearcher

        return ExhaustiveSearcher()
    if name in ("bayes", "bayesian", "optuna"):
        from cloudfit.search.bayesian import BayesianSearcher

        return BayesianSearcher(**options)
    raise UsageError(f"unknown searcher {name!r} (expected exhaustive or bayes)")


__all__ = ["Problem", "SearchResult", "Searcher", "get_searcher"]
