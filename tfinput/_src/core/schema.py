"""The feature schema: what each column is and how it becomes a fixed-shape tensor.

Feature kinds:

- `Dense`: a float scalar or fixed-length vector, with a default for missing values
  and optional clipping then ``log1p``.
- `Categorical`: one id per example. ``dtype="int64"`` ids must lie in
  ``[0, vocabulary_size)`` of their table (or be folded with ``out_of_range="modulo"``);
  ``dtype="string"`` values are hashed into the table's buckets with TensorFlow's own
  ``tf.strings.to_hash_bucket_fast`` (FarmHash), so training and serving agree.
- `MultiHot`: a variable-length list of ids (int64 or string, mapped as above), padded
  or truncated to ``max_len``, with optional per-id weights from another column.
- `Label`: a training target.

Every categorical names a `Table` (rows, embedding dim, combiner); several features may
share one table. Schemas round-trip through readable, hand-editable JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from tfinput._src.core.errors import (
    SchemaError,
    check_choice,
    check_int,
    check_name,
    field_error,
)
from tfinput._src.core.options import load_json

#: Largest table the TPU embedding path can address: ids are cast to int32.
MAX_INT32_VOCAB = 2**31 - 1
#: Largest ``MultiHot.max_len``: a dense batch holds ``batch * max_len`` ids and weights
#: (8 bytes each), so 2,000,000 would be 4 GB for a batch of 256. The pipeline also
#: logs a warning at build when one padded batch of a feature exceeds 256 MiB.
MAX_LEN = 65_536
SCHEMA_FORMAT = "tfinput.schema/1"

_COMBINERS = ("mean", "sum", "sqrtn")
_DENSE_DTYPES = ("float32", "int64")
_LABEL_DTYPES = ("float32", "int64")
#: The sides of a two-tower retrieval model a feature can feed (`Dense.tower`).
TOWERS = ("query", "candidate")


def _check_tower(owner: str, tower: object) -> None:
    if tower is not None and tower not in TOWERS:
        raise field_error(owner, "tower", '"query", "candidate" or null', tower)


class _Column:
    """What every feature and label has: the column it reads."""

    name: str
    column: str | None

    @property
    def source(self) -> str:
        return self.column or self.name


class _Ids(_Column):
    """The fields `Categorical` and `MultiHot` share, and their checks."""

    table: str
    dtype: str
    out_of_range: str
    tower: str | None

    def __post_init__(self) -> None:
        kind = type(self).__name__
        owner = f"{kind} {getattr(self, 'name', None)!r}"
        check_name(kind, self.name)
        check_name(f"{owner}.table", self.table)
        check_choice(owner, "dtype", self.dtype, ("int64", "string"))
        check_choice(owner, "out_of_range", self.out_of_range, ("error", "modulo"))
        _check_tower(owner, self.tower)
        default = getattr(self, "default", None)
        if default is None:
            return
        if self.dtype == "string" and not isinstance(default, str):
            raise field_error(owner, "default", "a string (dtype is string)", default)
        if self.dtype == "int64" and (isinstance(default, bool) or not isinstance(default, int)):
            raise field_error(owner, "default", "an int (dtype is int64)", default)
        if self.dtype == "int64" and default < 0:
            raise field_error(owner, "default", "a non-negative id", default)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Table:
    """An embedding table.

    Attributes:
      name: Table name; features refer to it.
      vocabulary_size: Rows. Ids must lie in ``[0, vocabulary_size)``; for string
        features it is the number of hash buckets. At most 2**31 - 1 (int32 ids).
      dim: Embedding dimension.
      combiner: How a multi-hot row's embeddings combine: ``mean``, ``sum``, ``sqrtn``.
    """

    name: str
    vocabulary_size: int
    dim: int
    combiner: Literal["mean", "sum", "sqrtn"] = "mean"

    def __post_init__(self) -> None:
        owner = f"Table {self.name!r}"
        check_name("Table", self.name)
        check_int(owner, "vocabulary_size", self.vocabulary_size, 1, MAX_INT32_VOCAB)
        check_int(owner, "dim", self.dim, 1)
        check_choice(owner, "combiner", self.combiner, _COMBINERS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dense(_Column):
    """A float feature: a scalar (``length=None``) or a fixed-length vector.

    Attributes:
      name: Feature name (and source column / tf.Example key unless ``column`` is set).
      length: None for a scalar ``[B]``; an int for a vector ``[B, length]``.
      dtype: How the value is stored in the files: ``float32`` or ``int64``. The output
        is always float32.
      default: Value used when the feature is missing from a record.
      clip: Optional ``(low, high)`` bounds (either may be None) applied first.
      log1p: Apply ``log(1 + x)`` after clipping (use ``clip=(0, None)`` for counts that
        may be negative, as Criteo's are).
      column: Source column name if it differs from ``name``.
      tower: ``"query"`` or ``"candidate"``: the side of a two-tower retrieval model
        this feature feeds (`Pipeline.with_towers`); None (the default) for none.
    """

    kind: ClassVar[str] = "dense"
    name: str
    length: int | None = None
    dtype: Literal["float32", "int64"] = "float32"
    default: float = 0.0
    clip: tuple[float | None, float | None] | None = None
    log1p: bool = False
    column: str | None = None
    tower: Literal["query", "candidate"] | None = None

    def __post_init__(self) -> None:
        owner = f"Dense {self.name!r}"
        _check_tower(owner, self.tower)
        check_name("Dense", self.name)
        if self.length is not None:
            check_int(owner, "length", self.length, 1)
        check_choice(owner, "dtype", self.dtype, _DENSE_DTYPES)
        if isinstance(self.default, bool) or not isinstance(self.default, (int, float)):
            raise field_error(owner, "default", "a number", self.default)
        if self.default != self.default or self.default in (float("inf"), float("-inf")):
            raise field_error(owner, "default", "a finite number", self.default)
        if self.clip is not None:
            clip = tuple(self.clip)
            if len(clip) != 2 or not all(c is None or isinstance(c, (int, float)) for c in clip):
                raise field_error(owner, "clip", "[low, high] with numbers or nulls", self.clip)
            if any(c is not None and c != c for c in clip):
                raise field_error(
                    owner, "clip", "[low, high] with numbers (not NaN) or nulls", self.clip
                )
            if clip[0] is not None and clip[1] is not None and clip[0] > clip[1]:
                raise field_error(owner, "clip", "low <= high", self.clip)
            object.__setattr__(self, "clip", clip)
        if not isinstance(self.log1p, bool):
            raise field_error(owner, "log1p", "true or false", self.log1p)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Categorical(_Ids):
    """One categorical id per example, looked up in ``table``.

    Attributes:
      name: Feature name.
      table: Name of the `Table` the id indexes.
      dtype: ``int64`` ids, or ``string`` values hashed into the table's buckets.
      default: Value used when missing (an int for int64, a string for string).
        None makes the feature required: a record without it is an error.
      out_of_range: For int64 ids outside ``[0, vocabulary_size)``: ``error`` (raise,
        naming the feature and the id) or ``modulo`` (fold every id into the table
        with a floor modulo: large ids wrap around, and a ``-1`` missing-value marker
        becomes ``vocabulary_size - 1``, which inference reserves for it). Under
        ``error``, negative ids are an error naming the feature.
      column: Source column name if it differs from ``name``.
      tower: As for `Dense`.
    """

    kind: ClassVar[str] = "categorical"
    name: str
    table: str
    dtype: Literal["int64", "string"] = "int64"
    default: int | str | None = None
    out_of_range: Literal["error", "modulo"] = "error"
    column: str | None = None
    tower: Literal["query", "candidate"] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiHot(_Ids):
    """A variable-length list of ids, emitted as ``[B, max_len]`` ids plus weights.

    Attributes:
      name: Feature name.
      table: Name of the `Table` the ids index.
      max_len: Ids kept per example; longer lists keep their first ``max_len`` ids,
        shorter ones are padded with id 0 and weight 0. Empty lists are legal.
        At most `MAX_LEN` (65,536); the dense format costs ``8 * batch * max_len``
        bytes per batch, and the pipeline warns at build above 256 MiB.
      dtype: ``int64`` ids or ``string`` values hashed into the table's buckets.
      weights: Name of a float list column (same length as the ids, row by row) giving
        per-id weights; None gives weight 1 to every real id.
      out_of_range: As for `Categorical`.
      column: Source column name if it differs from ``name``.
      tower: As for `Dense`.
    """

    kind: ClassVar[str] = "multi_hot"
    name: str
    table: str
    max_len: int
    dtype: Literal["int64", "string"] = "int64"
    weights: str | None = None
    out_of_range: Literal["error", "modulo"] = "error"
    column: str | None = None
    tower: Literal["query", "candidate"] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"MultiHot {self.name!r}", "max_len", self.max_len, 1, MAX_LEN)
        if self.weights is not None:
            check_name(f"MultiHot {self.name!r}.weights", self.weights)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Label(_Column):
    """A training target (``[B]``, float32 in the output).

    Attributes:
      name: Label name.
      dtype: How it is stored: ``float32`` or ``int64``.
      default: Value when missing; None makes it required.
      column: Source column name if it differs from ``name``.
    """

    kind: ClassVar[str] = "label"
    name: str
    dtype: Literal["float32", "int64"] = "float32"
    default: float | None = None
    column: str | None = None

    def __post_init__(self) -> None:
        check_name("Label", self.name)
        check_choice(f"Label {self.name!r}", "dtype", self.dtype, _LABEL_DTYPES)


Feature = Dense | Categorical | MultiHot
_KINDS: dict[str, type] = {"dense": Dense, "categorical": Categorical, "multi_hot": MultiHot}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schema:
    """Features, their tables and the labels.

    Attributes:
      features: The input features, in output order.
      tables: Embedding tables referenced by the categorical features.
      labels: One or more labels. With one label the pipeline yields
        ``(features, label)``; with several, ``(features, {name: label})``.
      candidate_id: For two-tower retrieval: the `Categorical` feature (with
        ``tower="candidate"``) that identifies a candidate; the candidate corpus
        (`tfinput.retrieval.candidate_corpus`) is deduplicated by it and recall@k
        compares it. None: no candidate id.
    """

    features: tuple[Feature, ...]
    tables: tuple[Table, ...] = ()
    labels: tuple[Label, ...] = ()
    candidate_id: str | None = None

    def __post_init__(self) -> None:
        for field in ("features", "tables", "labels"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        for f in self.features:
            if not isinstance(f, (Dense, Categorical, MultiHot)):
                raise SchemaError(
                    f"Schema.features: expected Dense, Categorical or MultiHot, got {f!r}"
                )
        table_names = [t.name for t in self.tables]
        named = [f.name for f in self.features] + [lab.name for lab in self.labels]
        for what, names in (("feature or label", named), ("table", table_names)):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise SchemaError(f"Schema: duplicate {what} names {dupes}")
        for f in self.categorical:
            if f.table not in table_names:
                raise SchemaError(
                    f"Schema: feature {f.name!r} uses table {f.table!r}, which is not "
                    f"defined; tables: {table_names}"
                )
        vocab = {t.name: t.vocabulary_size for t in self.tables}
        for f in self.categorical:
            default = f.default if isinstance(f, Categorical) else None
            if isinstance(default, int) and f.out_of_range == "error" and default >= vocab[f.table]:
                raise SchemaError(
                    f"Schema: feature {f.name!r}: default {default} is outside table "
                    f"{f.table!r} (ids in [0, {vocab[f.table]})); use an id in range or "
                    "out_of_range='modulo'"
                )
        self._check_column_shapes()
        unused = set(table_names) - {f.table for f in self.categorical}
        if unused:
            raise SchemaError(f"Schema: tables {sorted(unused)} are used by no feature")
        if not self.features:
            raise SchemaError("Schema: no features")
        if self.candidate_id is not None:
            self._check_candidate_id(self.candidate_id)

    def _check_column_shapes(self) -> None:
        """A source column has one shape: features may share a column (a numeric and
        a categorical view of one field) only where they read it the same way."""

        def shape(f: Feature) -> str:
            if isinstance(f, MultiHot):
                return "a list of ids"
            if isinstance(f, Dense) and f.length is not None:
                return f"a vector of {f.length}"
            return "one value"

        readers: dict[str, tuple[str, str]] = {}  # column -> (shape, first feature)
        for f in self.features:
            columns = [(f.source, shape(f))]
            if isinstance(f, MultiHot) and f.weights:
                columns.append((f.weights, "a list of weights"))
            for column, kind in columns:
                seen, first = readers.setdefault(column, (kind, f.name))
                if seen != kind and not {seen, kind} <= {"a list of ids", "a list of weights"}:
                    raise SchemaError(
                        f"Schema: column {column!r} is read as {seen} by feature {first!r} "
                        f"and as {kind} by feature {f.name!r}; a column has one shape: "
                        "give one of them its own column (column=...)"
                    )

    def _check_candidate_id(self, name: Any) -> None:
        if not isinstance(name, str) or name not in {f.name for f in self.features}:
            raise SchemaError(
                f"Schema.candidate_id: expected the name of a feature, got {name!r}; "
                f"features: {[f.name for f in self.features]}"
            )
        f = self.feature(name)
        if not isinstance(f, Categorical) or f.tower != "candidate":
            raise SchemaError(
                f"Schema.candidate_id: feature {name!r} must be a Categorical with "
                f'tower="candidate" (one id per candidate), got {type(f).__name__} with '
                f"tower={f.tower!r}"
            )

    # ----------------------------------------------------------------- views
    @property
    def dense(self) -> tuple[Dense, ...]:
        return tuple(f for f in self.features if isinstance(f, Dense))

    @property
    def categorical(self) -> tuple[Categorical | MultiHot, ...]:
        return tuple(f for f in self.features if isinstance(f, (Categorical, MultiHot)))

    @property
    def multi_hot(self) -> tuple[MultiHot, ...]:
        return tuple(f for f in self.features if isinstance(f, MultiHot))

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise SchemaError(f"Schema: no table {name!r}; tables: {[t.name for t in self.tables]}")

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise SchemaError(
            f"Schema: no feature {name!r}; features: {[f.name for f in self.features]}"
        )

    def tower(self, name: str) -> tuple[Feature, ...]:
        """The features of one tower (``"query"`` or ``"candidate"``), in schema order.

        Raises:
          SchemaError: ``name`` is not a tower.
        """
        if name not in TOWERS:
            raise SchemaError(f'Schema.tower: expected "query" or "candidate", got {name!r}')
        return tuple(f for f in self.features if f.tower == name)

    def with_towers(
        self,
        *,
        query: Iterable[str] = (),
        candidate: Iterable[str] = (),
        candidate_id: str | None = None,
    ) -> Schema:
        """This schema with features marked for the two towers of a retrieval model.

        Features not named keep their ``tower``; ``candidate_id``, when given, replaces
        the schema's (it is marked ``candidate`` too).

        Args:
          query: Names of the query-side (user, context) features.
          candidate: Names of the candidate-side (item) features.
          candidate_id: The candidate-side `Categorical` that identifies a candidate.

        Raises:
          SchemaError: an unknown name, a name on both sides, or a bad ``candidate_id``.
        """
        sides = {name: "query" for name in query}
        for name in [*candidate, *([candidate_id] if candidate_id else [])]:
            if sides.get(name) == "query":
                raise SchemaError(
                    f"Schema.with_towers: feature {name!r} is named for both towers; "
                    "a feature feeds one tower (give each side its own feature)"
                )
            sides[name] = "candidate"
        for name in sides:
            self.feature(name)  # raises for an unknown name
        features = tuple(
            dataclasses.replace(f, tower=sides[f.name]) if f.name in sides else f
            for f in self.features
        )
        return self.replace(
            features=features,
            candidate_id=candidate_id if candidate_id is not None else self.candidate_id,
        )

    def tower_schema(self, name: str | None = None) -> Schema:
        """A schema of one tower's features (``name``) and their tables, without labels;
        or, with ``name`` None, of every tower-marked feature plus the labels (what a
        `Pipeline.with_towers` build reads and emits).

        Raises:
          SchemaError: the tower has no features.
        """
        if name is None:
            features = tuple(f for f in self.features if f.tower is not None)
            labels = self.labels
        else:
            features, labels = self.tower(name), ()
        if not features:
            which = f"tower {name!r}" if name else "either tower"
            raise SchemaError(
                f"Schema: no feature is marked for {which}; mark features with "
                'tower="query" / tower="candidate" (or Schema.with_towers)'
            )
        used = {f.table for f in features if isinstance(f, (Categorical, MultiHot))}
        cid = self.candidate_id
        if cid is not None and cid not in {f.name for f in features}:
            cid = None
        return Schema(
            features=features,
            tables=tuple(t for t in self.tables if t.name in used),
            labels=labels,
            candidate_id=cid,
        )

    def columns(self) -> list[str]:
        """Every source column (or tf.Example key) the schema reads, in order."""
        cols: list[str] = []
        for f in self.features:
            cols.append(f.source)
            if isinstance(f, MultiHot) and f.weights:
                cols.append(f.weights)
        cols += [lab.source for lab in self.labels]
        return cols

    def replace(self, **changes: Any) -> Schema:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        def strip(obj: Any, kind: str | None) -> dict[str, Any]:
            out: dict[str, Any] = {"kind": kind} if kind else {}
            defaults = {f.name: f.default for f in dataclasses.fields(obj)}
            for key, value in dataclasses.asdict(obj).items():
                if key in ("name",) or value != defaults.get(key, dataclasses.MISSING):
                    out[key] = list(value) if isinstance(value, tuple) else value
            return out

        out: dict[str, Any] = {
            "format": SCHEMA_FORMAT,
            "tables": [strip(t, None) for t in self.tables],
            "features": [strip(f, f.kind) for f in self.features],
            "labels": [strip(lab, None) for lab in self.labels],
        }
        if self.candidate_id is not None:  # absent otherwise: older JSON stays the same
            out["candidate_id"] = self.candidate_id
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> Schema:
        if not isinstance(data, Mapping):
            raise SchemaError(f"{source}: expected a JSON object, got {type(data).__name__}")
        fmt = data.get("format", SCHEMA_FORMAT)
        if fmt != SCHEMA_FORMAT:
            raise SchemaError(
                f"{source}: format {fmt!r} is not supported; expected {SCHEMA_FORMAT}"
            )
        unknown = set(data) - {"format", "tables", "features", "labels", "candidate_id"}
        if unknown:
            raise SchemaError(f"{source}: unknown top-level keys {sorted(unknown)}")

        def build(kind_cls: type, item: Any, where: str) -> Any:
            if not isinstance(item, Mapping):
                raise SchemaError(f"{source}: {where}: expected an object, got {item!r}")
            item = {k: v for k, v in item.items() if k != "kind"}
            fields = {f.name for f in dataclasses.fields(kind_cls)}
            bad = set(item) - fields
            if bad:
                raise SchemaError(
                    f"{source}: {where}: unknown keys {sorted(bad)} for {kind_cls.__name__}; "
                    f"allowed: {sorted(fields)}"
                )
            try:
                return kind_cls(**item)
            except TypeError as e:
                raise SchemaError(f"{source}: {where}: {e}") from e
            except SchemaError as e:
                raise SchemaError(f"{source}: {where}: {e}") from e

        features = []
        for i, item in enumerate(data.get("features", [])):
            kind = item.get("kind") if isinstance(item, Mapping) else None
            if kind not in _KINDS:
                raise SchemaError(
                    f"{source}: features[{i}]: kind must be one of {sorted(_KINDS)}, got {kind!r}"
                )
            features.append(build(_KINDS[kind], item, f"features[{i}] ({item.get('name')})"))
        tables = [build(Table, t, f"tables[{i}]") for i, t in enumerate(data.get("tables", []))]
        labels = [build(Label, t, f"labels[{i}]") for i, t in enumerate(data.get("labels", []))]
        try:
            return cls(
                features=tuple(features),
                tables=tuple(tables),
                labels=tuple(labels),
                candidate_id=data.get("candidate_id"),
            )
        except SchemaError as e:
            raise SchemaError(f"{source}: {e}") from e

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """Readable JSON, one feature per line; with ``path`` also write the file."""
        d = self.to_dict()
        lines = ["{", f'  "format": {json.dumps(d["format"])},']
        if "candidate_id" in d:
            lines.append(f'  "candidate_id": {json.dumps(d["candidate_id"])},')
        for key in ("tables", "features", "labels"):
            items = d[key]
            lines.append(f'  "{key}": [')
            for i, item in enumerate(items):
                comma = "," if i < len(items) - 1 else ""
                lines.append(f"    {json.dumps(item)}{comma}")
            lines.append("  ]," if key != "labels" else "  ]")
        text = "\n".join(lines) + "\n}\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, path_or_text: str | os.PathLike[str]) -> Schema:
        """Load from a JSON file path or a JSON string."""
        data, source = load_json(path_or_text, SchemaError, "schema")
        return cls.from_dict(data, source=source)

    @classmethod
    def of(
        cls,
        features: Iterable[Feature],
        *,
        tables: Iterable[Table] = (),
        labels: Iterable[Label | str] = (),
    ) -> Schema:
        """Convenience constructor; labels may be given by name."""
        labs = tuple(lab if isinstance(lab, Label) else Label(name=lab) for lab in labels)
        return cls(features=tuple(features), tables=tuple(tables), labels=labs)
