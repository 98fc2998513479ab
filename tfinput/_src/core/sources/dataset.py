"""`DatasetSource`: a user's own ``tf.data.Dataset`` of feature dicts."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, ClassVar

import tensorflow as tf

from tfinput._src.core.errors import ConfigError, SchemaError, SourceError, did_you_mean
from tfinput._src.core.schema import MultiHot, Schema
from tfinput._src.core.sources._row_shuffle import shuffle_row_windows, shuffle_window
from tfinput._src.core.sources.protocol import (
    Decode,
    ReadRequest,
    Resume,
    Source,
    knob_is_set,
    traced,
)
from tfinput._src.core.transforms import guard

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

log = logging.getLogger("tfinput")

#: Knobs about files, which a wrapped dataset does not have.
_FILE_KNOBS = ("interleave_cycle_length", "interleave_block_length", "interleave_parallelism")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetSource(Source):
    """A user's own ``tf.data.Dataset`` of feature dicts, wrapped so every tfinput
    transform applies.

    The pipeline shards it by ``Dataset.shard`` under a distribution strategy, caches,
    shuffles and batches it (``ragged_batch``) unless its elements are already batches
    (``batched=True``: the source then batches by itself). Batches of a static size other
    than the config's are refused at build unless ``rebatch=True`` re-cuts them to the
    config's batch size (per replica under a strategy) with ``Dataset.rebatch``, which the
    tuner's ``--tune-batch-size`` then searches. A ``shuffle_buffer`` shuffles single
    elements with tf.data's ``shuffle``, or, for batches, their rows: re-cut into windows
    of the buffer rounded up to whole batches (at least two), each permuted, then cut into
    batches again (three copies of each row), so that rows cross batch boundaries. The
    interleave knobs and file shuffling have no effect on a dataset without files (a
    warning names them). Whether a build's read
    position can be checkpointed depends on the wrapped dataset (``resume =
    "dataset"``: tf.data's iterator checkpointing works when every op of it supports it).

    Elements may also be Keras-style ``(features, labels)`` pairs: ``labels`` a tensor
    when the schema has one label (it becomes that label's source column), or a dict
    keyed by the labels' source columns. They are merged into one dict before anything
    else (a structural map, no copy).

    Attributes:
      dataset: Either a dataset or a zero-argument callable returning one (called at
        every build, so each build gets a fresh input). Elements are dicts keyed by the
        schema's source columns, or ``(features, labels)`` pairs: scalars for
        dense/categorical/labels, 1-D tensors of any length for multi-hot lists (or,
        with ``batched=True``, ``[B]`` tensors and ``RaggedTensor`` lists).
      batched: Whether elements are already batches.
      rebatch: Re-cut the batches to the config's batch size (needs ``batched``).

    Raises:
      ConfigError: ``rebatch`` without ``batched``.
    """

    dataset: tf.data.Dataset
    batched: bool = False
    rebatch: bool = False

    def __post_init__(self) -> None:
        if self.rebatch and not self.batched:
            raise ConfigError(
                "wrap(..., rebatch=True) re-cuts batches: it needs batched=True (an "
                "unbatched dataset is batched to the config's batch size already)"
            )

    kind: ClassVar[str] = "dataset"
    resume: ClassVar[Resume] = "dataset"

    @property
    def batches_itself(self) -> bool:  # type: ignore[override]
        """Whether the elements are already batches (``batched``)."""
        return self.batched

    def files(self) -> list[str]:
        return []

    @property
    def ignored_knobs(self) -> tuple[str, ...]:  # type: ignore[override]
        """The interleave knobs and ``read_batch`` (no files)."""
        return _FILE_KNOBS + ("read_batch",)

    def make(self) -> tf.data.Dataset:
        """The wrapped dataset (the callable's result, when given one).

        Raises:
          SourceError: it is not a ``tf.data.Dataset``.
        """
        ds = self.dataset() if callable(self.dataset) else self.dataset
        if not isinstance(ds, tf.data.Dataset):
            raise SourceError(
                f"wrapped source: expected a tf.data.Dataset, got {type(ds).__name__}"
            )
        return ds

    def dicts(self, schema: Schema) -> tf.data.Dataset:
        """The wrapped dataset with ``(features, labels)`` pairs merged into dicts.

        Raises:
          SchemaError: elements are neither dicts nor such pairs, a label tensor with
            a schema of several labels, or a label key that is also a feature key.
        """
        ds = self.make()
        merge = _merger(ds.element_spec, schema)
        return ds if merge is None else ds.map(traced(merge))

    def validate(self, files: list[str], schema: Schema) -> None:
        spec = self.dicts(schema).element_spec
        wanted = [(f.name, f.source, f) for f in schema.features]
        wanted += [(lab.name, lab.source, lab) for lab in schema.labels]
        for name, key, f in wanted:
            if key not in spec:
                raise SchemaError(
                    f"wrapped dataset: feature {name!r}: key {key!r} missing; keys: "
                    f"{sorted(spec)}" + did_you_mean(key, spec)
                )
            dtype = spec[key].dtype
            if not isinstance(f, MultiHot):
                _check_wrapped_shape(name, key, f, spec[key].shape, self.batched)
            want_string = getattr(f, "dtype", None) == "string"
            if want_string != (dtype == tf.string):
                raise SchemaError(
                    f"wrapped dataset: feature {name!r}: key {key!r} has dtype {dtype.name}; "
                    f"the schema expects {'string' if want_string else 'numbers'}"
                )

    def unhonoured(self, request: ReadRequest) -> dict[str, str]:
        config = request.config
        out = {k: "a wrapped dataset has no files" for k in _FILE_KNOBS if knob_is_set(config, k)}
        if request.shuffle_files:
            out["shuffle_files"] = "a wrapped dataset has no files"
        return out

    def read(self, request: ReadRequest) -> tf.data.Dataset:
        """The wrapped dataset as dicts, sharded by ``Dataset.shard`` for this input
        pipeline.

        Raises:
          ConfigError: batches without a static size, or of one other than the
            config's, not rebatched.
        """
        ds = self.dicts(request.schema)
        size = _static_batch(ds.element_spec) if self.batched and not self.rebatch else None
        if self.batched and not self.rebatch and size is None:
            raise ConfigError(
                "wrapped dataset: batched=True, but its batches have no static size (a "
                "Dataset.batch without drop_remainder=True, whose last batch may be "
                f"partial), and the config asks for batches of {request.batch_size} (per "
                "replica): batch with drop_remainder=True, or wrap(..., batched=True, "
                "rebatch=True) to re-cut them to the config's size (a partial last batch is "
                "then dropped or kept as drop_remainder says)"
            )
        if size is not None and size != request.batch_size:
            raise ConfigError(
                f"wrapped dataset: its batches hold {size} examples, the config asks for "
                f"{request.batch_size} (per replica): build with batch_size={size} (times "
                "the replicas), or wrap(..., batched=True, rebatch=True) to re-cut them"
            )
        context = request.input_context
        if context is not None and context.num_input_pipelines > 1:
            ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds

    def shuffle_buffer(self, records: tf.data.Dataset, request: ReadRequest) -> int:
        """``shuffle_buffer`` capped at the dataset's size when it is known (logged)."""
        buffer = request.config.shuffle_buffer
        known = int(records.cardinality())  # -1 infinite, -2 unknown
        if 0 <= known < buffer:  # a larger buffer only costs ~24 bytes a slot
            log.warning(
                "tfinput: shuffle_buffer %d is larger than the wrapped dataset's %d "
                "element(s); using %d",
                buffer,
                known,
                max(known, 1),
            )
            buffer = max(known, 1)
        return buffer

    def batch(self, records: tf.data.Dataset, request: ReadRequest) -> tuple[Any, Decode]:
        """``ragged_batch(B)`` unless ``batched``; batches re-cut with ``rebatch``, and
        their rows shuffled in windows (`shuffle_row_windows`) with a ``shuffle_buffer``;
        decoding squeezes ``[B, 1]`` scalars, makes lists ragged and casts numbers to
        the schema's dtypes."""
        ds = records
        config, size = request.config, request.batch_size
        if not self.batched:
            ds = ds.ragged_batch(size, drop_remainder=config.drop_remainder)
        elif config.shuffle_buffer:
            window = shuffle_window(config.shuffle_buffer, size)
            ds = shuffle_row_windows(ds.rebatch(window), window_rows=window, config=config)
            # Batches of the static size come back whole: every row is in one of them.
            ds = ds.rebatch(size, drop_remainder=config.drop_remainder or not self.rebatch)
        elif self.rebatch:
            ds = ds.rebatch(size, drop_remainder=config.drop_remainder)
        return ds, _decoder(request.schema)


def _static_batch(spec: Any) -> int | None:
    """The static leading dimension of a batched element, if every part has the same."""
    sizes = {
        s.shape[0]
        for s in tf.nest.flatten(spec)
        if getattr(s, "shape", None) is not None and s.shape.rank
    }
    return int(next(iter(sizes))) if len(sizes) == 1 and None not in sizes else None


def _merger(spec: Any, schema: Schema) -> Any:
    """None for dict elements; for ``(features, labels)`` pairs, the function merging
    them into one dict.

    Raises:
      SchemaError: another element structure, or labels that do not fit the schema.
    """
    if isinstance(spec, dict):
        return None
    if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], dict)):
        raise SchemaError(
            "wrapped dataset: elements must be dicts keyed by column or (features, labels) "
            f"pairs of a dict and a tensor or dict, got {spec}"
        )
    features, labels = spec
    sources = [lab.source for lab in schema.labels]
    if isinstance(labels, dict):
        keys = list(labels)
    elif len(sources) == 1:
        keys = sources
    else:
        raise SchemaError(
            f"wrapped dataset: (features, label) pairs with one label tensor, but the schema "
            f"has {len(sources)} labels {sources}: yield the labels as a dict keyed by "
            "their source columns"
        )
    clash = sorted(set(keys) & set(features))
    if clash:
        raise SchemaError(
            f"wrapped dataset: label key(s) {clash} are also feature keys of the "
            "(features, labels) pairs: keep each column in one of the two"
        )

    def merge(x: dict[str, Any], y: Any) -> dict[str, Any]:
        return {**x, **(y if isinstance(y, dict) else {keys[0]: y})}

    return merge


def _check_wrapped_shape(name: str, key: str, f: Any, shape: tf.TensorShape, batched: bool) -> None:
    """Scalars may come as ``[]`` or ``[1]`` per example (``FixedLenFeature([1])``),
    vectors as ``[length]``; batched elements add a leading batch dimension."""
    dims = shape.as_list() if shape.rank is not None else None
    if dims is None:
        return  # unknown rank: checked by the transforms' ops at run time
    if batched:
        dims = dims[1:]
    length = getattr(f, "length", None)
    allowed = ([length],) if length is not None else ([], [1])
    if dims not in allowed and not (length is not None and dims == [None]):
        kind = f"vectors of length {length}" if length is not None else "scalars ([] or [1])"
        raise SchemaError(
            f"wrapped dataset: feature {name!r}: key {key!r} has shape {dims} per example; "
            f"the schema expects {kind}"
        )


def _decoder(schema: Schema) -> Decode:
    """A wrapped batch -> raw columns the transforms accept."""
    lists = {f.source for f in schema.multi_hot} | {f.weights for f in schema.multi_hot}
    scalars = [
        f.source
        for f in schema.features
        if not isinstance(f, MultiHot) and getattr(f, "length", None) is None
    ] + [lab.source for lab in schema.labels]

    def decode(batch: dict[str, Any]) -> dict[str, Any]:
        out = dict(batch)
        for key in scalars:  # FixedLenFeature([1]) gives [B, 1]: squeeze to [B]
            value = out[key]
            if isinstance(value, tf.Tensor) and value.shape.rank == 2 and value.shape[1] == 1:
                out[key] = tf.squeeze(value, axis=1)
        for key in lists:
            if key and key in out and isinstance(out[key], tf.Tensor):
                out[key] = tf.RaggedTensor.from_tensor(out[key])
        for f in schema.dense:
            out[f.source] = tf.cast(out[f.source], tf.float32)
        for f in schema.categorical:  # int32 ids (Python ints, numpy) become int64
            value = out[f.source]
            if f.dtype == "int64" and value.dtype.is_floating:
                _check_float_ids(f.name, f.source, value)
            if f.dtype == "int64" and value.dtype != tf.int64:
                out[f.source] = (
                    value.with_values(tf.cast(value.values, tf.int64))
                    if isinstance(value, tf.RaggedTensor)
                    else tf.cast(value, tf.int64)
                )
        return out

    return decode


#: Bits of each float dtype's significand: every integer up to 2**bits is exact.
_EXACT_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _check_float_ids(name: str, key: str, value: Any) -> None:
    """Float ids (a pandas int column with a missing value becomes float64) are read
    as integers when every value is whole and within the dtype's exact integers;
    anything else fails the batch with a `DataError` naming the feature and the value,
    never a silent truncation (100.7 -> 100) or a rounded large id."""
    flat = value.flat_values if isinstance(value, tf.RaggedTensor) else tf.reshape(value, [-1])
    dtype = value.dtype.name
    bits = _EXACT_BITS.get(dtype, 53)
    whole = tf.equal(flat, tf.math.floor(flat))  # False for NaN
    exact = tf.abs(flat) <= 2.0**bits  # False for inf and NaN
    ok = tf.logical_and(whole, exact)

    def explain() -> tf.Tensor:
        i = tf.argmin(tf.cast(ok, tf.int32))
        head = f"wrapped dataset: feature {name!r}: key {key!r} holds {dtype} ids; id "
        return tf.where(
            whole[i],
            tf.strings.join(
                [
                    head,
                    tf.strings.as_string(flat[i], precision=0),
                    f" is beyond 2^{bits}, where {dtype} no longer holds every integer "
                    "exactly (it may have been rounded): give the ids as int64",
                ]
            ),
            tf.strings.join(
                [
                    head,
                    tf.strings.as_string(flat[i], shortest=True),
                    " is not a whole number (float ids are read as integers when whole): "
                    "give the ids as int64 (missing ones filled), or fix the data",
                ]
            ),
        )

    guard(tf.reduce_all(ok), explain)
