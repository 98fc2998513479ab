"""Helpers for the model tests (import them: ``from tests.tfinput.measurement.models.conftest
import every_feature_kind, kinds_batches, towers, built_in``): a schema with every kind of
feature reading tables of any size, batches for it, and the built-in models over it."""

from __future__ import annotations

import numpy as np

from tfinput import models, retrieval
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table


def every_feature_kind(rows: int, dim: int = 8):
    """One dense feature; single ids ``a`` and ``b`` sharing table ``s``, ``c`` on ``t``;
    multi-hot ``m`` with weights on ``u``, ``n`` without on ``s`` (shared with ``a``
    and ``b``). Towers: the query reads ``s`` and ``u``, the candidate ``s`` and ``t``."""
    return Schema(
        features=(
            Dense(name="d"),
            Categorical(name="a", table="s"),
            Categorical(name="b", table="s"),
            Categorical(name="c", table="t"),
            MultiHot(name="m", table="u", max_len=5, weights="m_w"),
            MultiHot(name="n", table="s", max_len=4),
        ),
        tables=(
            Table(name="s", vocabulary_size=rows, dim=dim),
            Table(name="t", vocabulary_size=rows, dim=dim),
            Table(name="u", vocabulary_size=rows, dim=dim, combiner="sum"),
        ),
        labels=(Label(name="label"),),
    ).with_towers(query=["d", "a", "m"], candidate=["b", "c", "n"], candidate_id="b")


def kinds_batches(schema, rows: int, n: int, size: int = 64, seed: int = 0):
    """``n`` per-feature batches of ``schema`` (ids spread over the whole table,
    repeated within a batch; lists padded with id 0 and weight 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(0, rows, (size, 5))
        ids[:, 1] = ids[:, 0]  # a and b meet the same rows
        lens = rng.integers(0, 6, size)
        m_mask = np.arange(5) < lens[:, None]
        n_mask = np.arange(4) < np.minimum(lens, 4)[:, None]
        x = {
            "dense": {"d": rng.random(size, dtype=np.float32)},
            "ids": {
                "a": ids[:, 0],
                "b": ids[:, 1],
                "c": ids[:, 2],
                "m": np.where(m_mask, rng.integers(0, rows, (size, 5)), 0),
                "n": np.where(n_mask, ids[:, :4], 0),
            },
            "weights": {
                "m": (m_mask * rng.uniform(0.1, 1.0, (size, 5))).astype(np.float32),
                "n": n_mask.astype(np.float32),
            },
        }
        out.append((x, rng.integers(0, 2, size).astype(np.float32)))
    return out


def towers(x):
    """A per-feature batch of `_every_feature_kind` as `Pipeline.with_towers` gives it."""
    side = {"query": ("d", "a", "m"), "candidate": ("b", "c", "n")}
    return {
        s: {g: {k: v for k, v in x[g].items() if k in names} for g in x}
        for s, names in side.items()
    }


def built_in(which: str, schema, **kwargs):
    if which == "ranking":
        return models.ranking_model(schema, bottom=(8,), top=(8,), cross_layers=1, **kwargs)
    kwargs.setdefault("jit_compile", False)
    return retrieval.two_tower_model(schema, embedding_dim=8, hidden=(8,), **kwargs)
