"""Gradient-boosted trees evaluated in vectorised numpy (no xgboost at prediction time).

``cloudfit model fit`` trains with xgboost and stores each booster as plain arrays
(:func:`export_booster`); :class:`Forest` walks all trees for all rows at once, one tree level per
numpy step. Splits compare in float32, as xgboost does, so predictions agree with
``Booster.predict`` to float rounding (tested).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from typing import Any, Mapping

import numpy as np


def _parse_base_score(v: Any) -> float:
    s = str(v).strip().strip("[]")
    return float(s.split(",")[0])


def export_booster(booster: Any) -> dict[str, Any]:
    """An xgboost ``Booster`` → ``{"base_score", "trees": [{left, right, feature, threshold, default_left, value}]}``.

    Only what prediction needs, from xgboost's own JSON model (``save_raw("json")``): child indices,
    split feature and float32 threshold, the missing-value direction, and leaf values.
    """
    doc = json.loads(bytes(booster.save_raw(raw_format="json")).decode())
    learner = doc["learner"]
    trees = []
    for t in learner["gradient_booster"]["model"]["trees"]:
        left = [int(i) for i in t["left_children"]]
        leaf = [i == -1 for i in left]
        cond = [float(np.float32(c)) for c in t["split_conditions"]]
        trees.append({
            "left": left,
            "right": [int(i) for i in t["right_children"]],
            "feature": [int(i) if not lf else 0 for i, lf in zip(t["split_indices"], leaf)],
            "threshold": [0.0 if lf else c for c, lf in zip(cond, leaf)],
            "default_left": [int(bool(d)) for d in t["default_left"]],
            "value": [c if lf else 0.0 for c, lf in zip(cond, leaf)],
        })
    return {"base_score": _parse_base_score(learner["learner_model_param"]["base_score"]), "trees": trees}


@dataclass(frozen=True)
class Forest:
    """Packed trees: (n_trees, max_nodes) arrays; leaves point to themselves."""

    base_score: float
    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray  # float32
    default_left: np.ndarray
    value: np.ndarray
    depth: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Forest":
        trees = d["trees"]
        if not trees:
            z = np.zeros((0, 1), dtype=np.int32)
            return cls(float(d["base_score"]), z, z, z, z.astype(np.float32), z.astype(bool), z.astype(float), 0)
        k = np.array([len(t["left"]) for t in trees])
        m = int(k.max())
        shape = (len(trees), m)
        # every tree's nodes at once (a per-tree loop was most of the model's load time): (tree, node) of
        # each listed node, in order; padding nodes past a tree's end are self-loops
        at = (np.repeat(np.arange(len(trees)), k), np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))

        def flat(key: str, dtype) -> np.ndarray:
            return np.fromiter(chain.from_iterable(t[key] for t in trees), dtype=dtype, count=int(k.sum()))

        left = np.tile(np.arange(m, dtype=np.int32), (len(trees), 1))
        right = left.copy()
        feat = np.zeros(shape, dtype=np.int32)
        thr = np.zeros(shape, dtype=np.float32)
        dl = np.zeros(shape, dtype=bool)
        val = np.zeros(shape, dtype=np.float64)
        lf, rf = flat("left", np.int64), flat("right", np.int64)
        leaf = lf == -1
        left[at] = np.where(leaf, at[1], lf)
        right[at] = np.where(leaf, at[1], rf)
        feat[at] = flat("feature", np.int64)
        thr[at] = flat("threshold", np.float64).astype(np.float32)
        dl[at] = flat("default_left", np.int64).astype(bool)
        val[at] = flat("value", np.float64)
        internal = left != np.arange(m)[None, :]
        if np.any(internal & (right != left + 1)):
            raise ValueError("trees must keep each right child next to its left child (xgboost's layout)")
        return cls(float(d["base_score"]), left, right, feat, thr, dl, val, _max_depth(left, internal))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Margin (base score + sum of leaf values) for each row of ``X`` (n, n_features)."""
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        n, p = X32.shape
        t, m = self.left.shape
        if t == 0:
            return np.full(n, self.base_score)
        if np.isnan(X32).any():
            return self._predict_with_missing(X32)
        flat = self._flat()
        if n > 64:
            # Rows on the same side of every threshold get the same prediction: evaluate one per class.
            codes = np.zeros((n, p), dtype=np.int32)
            for j in range(min(p, len(flat.cuts))):
                codes[:, j] = np.searchsorted(flat.cuts[j], X32[:, j], side="right")
            first, inverse = _unique_rows(codes)
            if len(first) < n:
                return self._walk(X32[first], flat)[inverse.ravel()]
        return self._walk(X32, flat)

    def _walk(self, X32: np.ndarray, flat: "_Flat") -> np.ndarray:
        n, p = X32.shape
        t, m = self.left.shape
        # One flat index per (row, tree): tree offset + node. Leaves loop to themselves (threshold +inf,
        # "left" = self), so every row takes the same number of steps; the right child is left + 1.
        idx = np.empty((n, t), dtype=np.int32)
        idx[:] = np.arange(t, dtype=np.int32) * m
        row_base = (np.arange(n, dtype=np.int32) * p)[:, None]
        xf = X32.ravel()
        for _ in range(self.depth):
            cell = np.take(flat.feature, idx)
            cell += row_base
            go_right = np.take(xf, cell) >= np.take(flat.threshold, idx)
            idx = np.take(flat.left, idx)
            idx += go_right
        return self.base_score + np.take(flat.value, idx).sum(axis=1)

    def _flat(self) -> "_Flat":
        f = self.__dict__.get("_flat_cache")
        if f is None:
            t, m = self.left.shape
            leaf = self.left == np.arange(m)[None, :]
            base = (np.arange(t) * m)[:, None]
            internal = ~leaf
            n_feat = int(self.feature[internal].max()) + 1 if internal.any() else 0
            cuts = tuple(_unique(self.threshold[internal & (self.feature == j)]).astype(np.float32)
                         for j in range(n_feat))
            f = _Flat(feature=np.where(leaf, 0, self.feature).ravel().astype(np.int32),
                      threshold=np.where(leaf, np.float32(np.inf), self.threshold).ravel().astype(np.float32),
                      left=(np.where(leaf, np.arange(m)[None, :], self.left) + base).ravel().astype(np.int32),
                      value=self.value.ravel(), cuts=cuts)
            object.__setattr__(self, "_flat_cache", f)  # frozen dataclass: cache the packed arrays once
        return f

    def _predict_with_missing(self, X32: np.ndarray) -> np.ndarray:
        """Slow path honouring xgboost's default direction for missing values."""
        n = X32.shape[0]
        t = self.left.shape[0]
        trees = np.arange(t)[None, :]
        rows = np.arange(n)[:, None]
        node = np.zeros((n, t), dtype=np.int32)
        for _ in range(self.depth):
            f = self.feature[trees, node]
            x = X32[rows, f]
            go_left = np.where(np.isnan(x), self.default_left[trees, node], x < self.threshold[trees, node])
            node = np.where(go_left, self.left[trees, node], self.right[trees, node])
        return self.base_score + self.value[trees, node].sum(axis=1)


@dataclass(frozen=True)
class _Flat:
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray  # absolute flat index of the left child; the right child is left + 1 (xgboost layout)
    value: np.ndarray
    cuts: tuple[np.ndarray, ...]  # per feature: the sorted thresholds the trees compare it with


def _max_depth(left: np.ndarray, internal: np.ndarray) -> int:
    """Edges from the root to the deepest leaf over all trees (right child = left + 1), level by level."""
    frontier = np.zeros(left.shape, dtype=bool)
    frontier[:, 0] = True
    depth = 0
    while True:
        ti, ni = np.nonzero(frontier & internal)
        if not ti.size:
            return depth
        frontier = np.zeros(left.shape, dtype=bool)
        frontier[ti, left[ti, ni]] = True
        frontier[ti, left[ti, ni] + 1] = True
        depth += 1


# np.unique imports numpy.ma on first use (~25 ms, a tenth of `cloudfit recommend`'s budget): sort instead.
def _unique(v: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D array."""
    s = np.sort(v)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if s.size else s


def _unique_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, row → distinct-row id), like np.unique(axis=0)."""
    order = np.lexsort(codes.T[::-1])
    srt = codes[order]
    new = np.concatenate(([True], np.any(srt[1:] != srt[:-1], axis=1)))
    gid = np.cumsum(new) - 1
    inverse = np.empty(len(codes), dtype=np.int64)
    inverse[order] = gid
    return order[new], inverse
