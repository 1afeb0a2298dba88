"""The exact oracle: price every candidate at once and rank them (lazily: see ``SearchResult``)."""

from __future__ import annotations

import numpy as np

from cloudfit.search.problem import Problem, SearchResult


class ExhaustiveSearcher:
    name = "exhaustive"

    def search(self, space, problem: Problem) -> SearchResult:
        a = space.assess(problem)
        res = SearchResult(ranking=(a, problem, np.arange(len(space))), evaluations=len(space), searcher=self.name)
        res.first_hit = len(space) if res.n_feasible else None
        return res
