"""The decisions of schema inference, column by column: label, weights, dense feature or
id table (the rules are listed in `tfinput.inference`'s module docstring), and what
`tfinput.infer_schema` returns: the schema plus, column by column, what was observed and
decided (`Inference`, `ColumnStats`)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

import numpy as np

from tfinput._src.applications.inference._sample import ColumnSample, SampledColumn
from tfinput._src.core.errors import SchemaError
from tfinput._src.core.schema import MAX_LEN, Categorical, Dense, Label, MultiHot, Schema, Table

#: Column names (any case) taken as labels when ``labels`` is not given.
LABEL_NAMES = (
    "label",
    "labels",
    "click",
    "clicked",
    "clicks",
    "target",
    "y",
    "rating",
    "is_click",
    "conversion",
)
_LABEL_NAMES = re.compile(rf"^({'|'.join(LABEL_NAMES)})$", re.I)
_ID_NAMES = re.compile(r"(^id$|_id$|Id$|ID$|^c\d+$|^cat)", re.I)

#: Integers up to this magnitude are exact in float64 (dense features are floats).
_EXACT_FLOAT = 2**53
#: Integer id tables above this many rows (max id + 1) are folded into 4 x distinct rows.
MAX_DIRECT_ROWS = 1 << 24
#: Dense values above this are taken as heavy-tailed counts or large magnitudes.
LARGE_VALUE = 1000.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Rules:
    """What the caller decided for every column."""

    label_names: set[str] | None  # None: by name (`LABEL_NAMES`)
    text: bool  # CSV: negative ids hash as strings, categoricals always get a default
    hash_buckets: int | None
    weights_of: Mapping[str, str]  # {float list: the id list it weighs}

    def is_label(self, name: str) -> bool:
        if self.label_names is not None:
            return name in self.label_names
        return bool(_LABEL_NAMES.match(name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Decision:
    """What one column becomes: its kind and note, plus what it adds to the schema."""

    kind: str
    note: str = ""
    feature: Dense | Categorical | MultiHot | None = None
    table: Table | None = None
    label: Label | None = None


def decide(
    cols: list[SampledColumn],
    *,
    rows: int,
    files: list[str],
    label_names: set[str] | None,
    text: bool = False,
    notes: Mapping[str, str] | None = None,
    hash_buckets: int | None = None,
) -> Inference:
    """The schema for the sampled columns, with each column's statistics and decision.

    Args:
      cols: The sampled columns.
      rows: The rows sampled.
      files: The files sampled (for messages and the result).
      label_names: Columns to take as labels; None: by name (`LABEL_NAMES`).
      text: Whether the columns come from CSV text.
      notes: ``{column: note}`` from reading the text, put first in the column's note.
      hash_buckets: Rows of every hashed table (default: 4 x distinct values seen).

    Raises:
      SchemaError: no column makes a feature.
    """
    notes = notes or {}
    samples = [c.finish() for c in cols]
    rules = _Rules(
        label_names=label_names,
        text=text,
        hash_buckets=hash_buckets,
        weights_of=_weights_of(samples),
    )
    weights_for = {ids: weights for weights, ids in rules.weights_of.items()}
    stats: list[ColumnStats] = []
    decisions: list[_Decision] = []
    for sample in samples:
        observed = _observe(sample, rows)
        decision = _decide_column(sample, observed, rules, weights=weights_for.get(sample.name))
        note = _join(notes.get(sample.name, ""), decision.note.strip())
        stats.append(dataclasses.replace(observed, kind=decision.kind, note=note))
        decisions.append(decision)
    features = tuple(d.feature for d in decisions if d.feature is not None)
    if not features:
        raise SchemaError(f"no usable feature columns found in {files[0]!r} (and others)")
    schema = Schema(
        features=features,
        tables=tuple(d.table for d in decisions if d.table is not None),
        labels=tuple(d.label for d in decisions if d.label is not None),
    )
    return Inference(schema=schema, columns=tuple(stats), files=tuple(files), sampled_rows=rows)


def _weights_of(samples: list[ColumnSample]) -> dict[str, str]:
    """``{float list: id list}``: a float list whose row lengths always equal those of
    an int or string list (missing rows count as empty) is that list's weights."""
    lists = {s.name: s for s in samples if s.is_list}
    weights_of: dict[str, str] = {}
    for name, s in lists.items():
        if s.dtype != "float32":
            continue
        for other, o in lists.items():
            if (
                other != name
                and o.dtype != "float32"
                and np.array_equal(np.maximum(s.lengths, 0), np.maximum(o.lengths, 0))
            ):
                weights_of[name] = other
                break
    return weights_of


def _observe(sample: ColumnSample, rows: int) -> ColumnStats:
    """The statistics of one column (no kind or note yet)."""
    present, values = sample.present, sample.values
    s: dict[str, object] = {}
    if sample.is_list and present.size:
        s.update(
            length_p50=float(np.percentile(present, 50)),
            length_p90=float(np.percentile(present, 90)),
            length_p99=float(np.percentile(present, 99)),
            length_max=int(present.max()),
        )
    if values.size and sample.dtype != "string":
        s.update(min_value=float(values.min()), max_value=float(values.max()))
    if values.size:
        s["distinct"] = len(np.unique(values))
    return ColumnStats(
        name=sample.name,
        dtype=sample.dtype,
        is_list=sample.is_list,
        rows=rows,
        missing=sample.missing,
        **s,
    )


def _decide_column(
    sample: ColumnSample, observed: ColumnStats, rules: _Rules, *, weights: str | None
) -> _Decision:
    """The kind of one column; ``weights`` is the float list that weighs it, if any."""
    if rules.is_label(sample.name) and not sample.is_list:
        label = Label(
            name=sample.name,
            dtype="int64" if sample.dtype == "int64" else "float32",
            default=0.0 if sample.missing else None,
        )
        return _Decision(kind="label", label=label)
    if sample.name in rules.weights_of:
        return _Decision(kind=f"weights of {rules.weights_of[sample.name]}")
    if sample.dtype == "float32" and sample.is_list:
        return _vector(sample)
    if not sample.is_list and _is_dense(sample):
        dense, note = _dense(sample.name, sample.dtype, sample.values)
        return _Decision(kind="dense", note=note, feature=dense)
    return _ids(sample, observed, rules, weights=weights)


def _is_dense(sample: ColumnSample) -> bool:
    """A float scalar, or an int scalar not named like an id and exact as a float."""
    if sample.dtype == "float32":
        return True
    values = sample.values
    return (
        sample.dtype == "int64"
        and not _ID_NAMES.search(sample.name)
        and (not values.size or int(np.abs(values).max()) <= _EXACT_FLOAT)
    )


def _vector(sample: ColumnSample) -> _Decision:
    """A float list: a dense vector if every row has the same length, else skipped."""
    present = sample.present
    fixed = present.size and (present == present[0]).all() and present[0] > 0
    if not fixed:
        return _Decision(kind="skipped", note="variable-length float list: not a feature kind")
    return _Decision(kind="dense", feature=Dense(name=sample.name, length=int(present[0])))


def _dense(name: str, dtype: str, values: np.ndarray) -> tuple[Dense, str]:
    """A dense feature, with the transform proposed from observed statistics.

    Non-negative (or almost: negatives at most 1% of values, or none below -1) values
    above `LARGE_VALUE` are heavy-tailed counts: ``clip`` at 0 then ``log1p``. Other
    large magnitudes (values well below zero) are left unscaled, with a note: log1p
    needs x > -1, and `tfinput.models.ranking_model` normalises its dense inputs.
    """
    if not values.size:
        return Dense(name=name, dtype=dtype), ""
    finite = np.isfinite(values)
    if not finite.all():
        dense, note = _dense(name, dtype, values[finite])
        bad = f"{int((~finite).sum()):,} NaN/inf values: the pipeline rejects them (write nulls)"
        return dense, _join(bad, note)
    lo, hi = float(values.min()), float(values.max())
    neg = int((values < 0).sum())
    if hi > LARGE_VALUE and (lo >= -1 or neg <= 0.01 * values.size):
        note = f"large non-negative values (max {hi:.4g}): clip at 0 then log1p"
        if neg:
            note += f" ({neg:,} negative values, min {lo:g}, clipped to 0)"
        return Dense(name=name, dtype=dtype, clip=(0.0, None), log1p=True), note
    if max(abs(lo), abs(hi)) > LARGE_VALUE:
        note = (
            f"large magnitudes ({lo:.4g}..{hi:.4g}) with negative values: left unscaled "
            "(log1p needs x > -1); tfinput.models.ranking_model normalises dense inputs, "
            "set clip/log1p here or rescale the data for another model"
        )
        return Dense(name=name, dtype=dtype), note
    return Dense(name=name, dtype=dtype), ""


def _ids(
    sample: ColumnSample, observed: ColumnStats, rules: _Rules, *, weights: str | None
) -> _Decision:
    """An id column (int or string, scalar or list): its table, then a `Categorical` or
    a `MultiHot` on it; int columns with negative ids other than -1 are hashed as
    strings (CSV) or skipped."""
    dtype, values = sample.dtype, sample.values
    big = ""
    if dtype == "int64" and values.size and int(np.abs(values).max()) > _EXACT_FLOAT:
        big = (
            f"integers beyond 2**53 (max {int(values.max())}) are not exact as "
            "floats, so not dense: read as ids"
        )
    marker = 0  # rows of -1 "missing" markers, folded into a reserved id
    if dtype == "int64" and values.size and int(values.min()) == -1:
        marker = int((values == -1).sum())
        values = values[values != -1]
    if dtype == "int64" and values.size and int(values.min()) < 0:
        if not rules.text:
            return _Decision(kind="skipped", note=_join(big, _negative_ids(values, hashed=False)))
        dtype, big = "string", _join(big, _negative_ids(values, hashed=True))
    distinct = max(int(observed.distinct or 1), 1)
    vocab, out_of_range, vnote = _table_rows(
        dtype, values, distinct=distinct, marker=marker, hash_buckets=rules.hash_buckets
    )
    table = Table(name=sample.name, vocabulary_size=max(vocab, 1), dim=_dim(vocab))
    if sample.is_list:
        max_len = max(min(math.ceil(observed.length_p99 or 1), MAX_LEN), 1)
        feature: MultiHot | Categorical = MultiHot(
            name=sample.name,
            table=sample.name,
            dtype=dtype,
            max_len=max_len,
            weights=weights,
            out_of_range=out_of_range,
        )
        note = _join(big, f"max_len {max_len} (p99); " + vnote)
        return _Decision(kind="multi_hot", note=note, feature=feature, table=table)
    # CSV writes a missing value as an empty field anywhere: always a default.
    default = ("" if dtype == "string" else 0) if (sample.missing or rules.text) else None
    feature = Categorical(
        name=sample.name, table=sample.name, dtype=dtype, default=default, out_of_range=out_of_range
    )
    return _Decision(kind="categorical", note=_join(big, vnote), feature=feature, table=table)


def _negative_ids(values: np.ndarray, *, hashed: bool) -> str:
    """The note on int ids below zero (other than -1 markers): hashed as strings (CSV),
    else the column is skipped."""
    lo, neg = int(values.min()), int((values < 0).sum())
    seen = f"negative ids seen (min {lo}, {neg:,} of {values.size:,} values)"
    if hashed:
        return (
            f"{seen}: hashed as strings, so every value ({lo} included) keeps its own "
            "bucket (int ids must be >= 0)"
        )
    return (
        f"{seen}: not declared, since ids must be >= 0 (tfinput check rejects "
        "negative ids); map the marker to a missing value or to a reserved "
        "id >= 0 and declare the column categorical"
    )


def _table_rows(
    dtype: str, values: np.ndarray, *, distinct: int, marker: int, hash_buckets: int | None
) -> tuple[int, str, str]:
    """``(rows, out_of_range, note)`` of an id column's table.

    Hashed strings: ``hash_buckets`` or 4 x ``distinct``, a power of two. Int ids: max
    id + 1 (+ 1 reserved for ``marker`` -1 values seen), or folded like strings beyond
    `MAX_DIRECT_ROWS`; out of range ids are folded in (``modulo``).
    """
    if dtype == "string":
        vocab = hash_buckets or _pow2(4 * distinct)
        return (
            vocab,
            "error",
            f"{vocab} hash buckets" + ("" if hash_buckets else " (4x distinct seen)"),
        )
    hi = int(values.max()) if values.size else 0
    if hi + 1 > MAX_DIRECT_ROWS:
        vocab = hash_buckets or _pow2(4 * distinct)
        note = (
            f"ids up to {hi} are too sparse for a row per id: folded into {vocab} "
            "rows (out_of_range modulo)"
        )
    else:
        vocab = hi + 1 + (1 if marker else 0)
        note = (
            f"ids 0..{hi} seen: vocabulary {vocab} (sampled: larger ids are folded "
            "in, out_of_range modulo; check)"
        )
    if marker:
        note = _join(
            f"-1 seen {marker:,} times, taken as a missing marker: out_of_range "
            f"modulo folds it into id {vocab - 1}"
            + (" (reserved: no sampled id uses it)" if vocab == hi + 2 else ""),
            note,
        )
    return vocab, "modulo", note


def _dim(rows: int) -> int:
    """Embedding dim: ``6 · rows^¼`` rounded to a multiple of 4, within [4, 128]."""
    return int(min(128, max(4, 4 * round(6 * rows**0.25 / 4))))


def dim_rule(rows: int, dim: int) -> str:
    """Why a table of ``rows`` rows has ``dim``: the inference's rule with its numbers
    (``dim 108 = 6·V^¼ = 106.7 for V = 100,000, rounded to a multiple of 4``), or
    that the schema sets it."""
    if dim != _dim(rows):
        return f"dim {dim}: set in the schema (the rule would give {_dim(rows)})"
    raw = 6 * rows**0.25
    head = f"dim {dim} = 6·V^¼ = {raw:.1f} for V = {rows:,}"
    if raw / 4 > 32.5:
        return f"{head}, capped at 128"
    return f"{head}, rounded to a multiple of 4"


def _pow2(n: int) -> int:
    """``n`` rounded up to a power of two, at least 1,024."""
    return 1 << max(10, math.ceil(math.log2(max(n, 1))))


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnStats:
    """What sampling saw in one column."""

    name: str
    dtype: str  # "int64" | "float32" | "string"
    is_list: bool
    rows: int
    missing: int
    length_p50: float | None = None
    length_p90: float | None = None
    length_p99: float | None = None
    length_max: int | None = None
    min_value: float | None = None
    max_value: float | None = None
    distinct: int | None = None
    kind: str = ""  # the kind chosen
    note: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inference:
    """The inferred schema plus the statistics it was inferred from."""

    schema: Schema
    columns: tuple[ColumnStats, ...]
    files: tuple[str, ...]
    sampled_rows: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the files, the rows sampled, every column's statistics and the
        schema (``Schema.to_dict``)."""
        return {
            "files": list(self.files),
            "sampled_rows": self.sampled_rows,
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "schema": self.schema.to_dict(),
        }
