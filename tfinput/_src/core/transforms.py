"""Batch-level TensorFlow transforms: raw columns in, fixed-shape tensors out.

Every source produces a *raw batch*: a dict keyed by source column with

- dense columns as float32 ``[B]`` or ``[B, length]`` (missing values already filled),
- single categorical columns as int64 or string ``[B]``,
- list columns as `tf.RaggedTensor` ``[B, None]`` (ids, and weights if any),
- labels as ``[B]``.

`transform_batch` turns it into ``(features, labels)`` where ``features`` is::

    {"dense":   {name: float32 [B] or [B, length]},
     "ids":     {name: int32 [B] (categorical) or [B, max_len] (multi-hot)},
     "weights": {name: float32 [B, max_len]}}          # multi-hot only

Multi-hot ids are padded with id 0 and weight 0; nothing goes through
``tf.sparse.from_dense`` (which would drop real id 0). With ``multi_hot_format``
``"sparse"`` or ``"ragged"`` the multi-hot ids and weights are instead SparseTensor /
RaggedTensor int32 holding exactly the real (truncated) ids, for TPU host enqueue.
With ``layout`` (a `tfinput.layout.PackedLayout`) ``features`` is the packed groups
instead, built from the matrices the checks already run on (`tfinput.layout.pack`).

All checks are vectorized asserts whose messages name the feature and the value found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.layout import Block, PackedLayout, pack
from tfinput._src.core.schema import Categorical, Dense, MultiHot, Schema

MULTI_HOT_FORMATS = ("dense", "sparse", "ragged")
#: The TensorFlow dtype of each schema dtype name.
TF_DTYPES = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}


def parse_spec(schema: Schema) -> dict[str, Any]:
    """The `tf.io.parse_example` spec for a schema's tf.train.Example keys."""
    spec: dict[str, Any] = {}
    for f in schema.features:
        if isinstance(f, Dense):
            shape = [] if f.length is None else [f.length]
            default = f.default if f.length is None else [f.default] * f.length
            if f.dtype == "int64":
                default = int(f.default) if f.length is None else [int(f.default)] * f.length
            spec[f.source] = tf.io.FixedLenFeature(shape, TF_DTYPES[f.dtype], default)
        elif isinstance(f, Categorical):
            spec[f.source] = tf.io.FixedLenFeature([], TF_DTYPES[f.dtype], f.default)
        elif isinstance(f, MultiHot):
            spec[f.source] = tf.io.RaggedFeature(TF_DTYPES[f.dtype], row_splits_dtype=tf.int64)
            if f.weights:
                spec[f.weights] = tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
    for lab in schema.labels:
        spec[lab.source] = tf.io.FixedLenFeature([], TF_DTYPES[lab.dtype], lab.default)
    return spec


def guard(ok: tf.Tensor, explain: Callable[[], tf.Tensor]) -> tf.Tensor:
    """Fail with ``explain()`` unless ``ok``. The message is only computed on failure,
    so a passing check costs one scalar ``cond``."""

    def fail() -> tf.Tensor:
        message = tf.strings.join(["tfinput DataError: ", explain()])
        with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
            return tf.constant(False)

    return tf.cond(ok, lambda: tf.constant(True), fail)


#: A check of a batch: ``(ok, explain)``, ``explain()`` giving the message when not ok.
Check = tuple[tf.Tensor, Callable[[], tf.Tensor]]


def guard_all(checks: list[Check]) -> tf.Tensor | None:
    """One `guard` for all of a batch's checks: it fails with the message of the first
    check (in the order given) that does not hold. One ``cond`` per batch instead of one
    per check: each ``cond`` is two traced branch functions when the pipeline is built,
    and a function call per batch when it runs. The messages are computed only on
    failure."""
    if not checks:
        return None
    if len(checks) == 1:
        return guard(*checks[0])
    oks = tf.stack([ok for ok, _ in checks])

    def explain() -> tf.Tensor:
        messages = tf.stack([tf.reshape(why(), []) for _, why in checks])
        return messages[tf.argmin(tf.cast(oks, tf.int32))]

    return guard(tf.reduce_all(oks), explain)


def _s(x: tf.Tensor) -> tf.Tensor:
    return tf.strings.as_string(x)


#: Multi-hot features whose ids are range-checked together: ``(features, their flat
#: int64 values concatenated, feature by feature, the number of values of each)``.
ListGroup = tuple[list[MultiHot], tf.Tensor, tf.Tensor]


def _list_group(
    feats: list[MultiHot], values: list[tf.Tensor], sizes: tf.Tensor | None = None
) -> ListGroup:
    """The flat values of ``feats`` as one `ListGroup` (one concatenation); ``sizes``:
    the values of each, if known."""
    if sizes is None:
        sizes = tf.stack([tf.size(v, out_type=tf.int64) for v in values])
    return feats, tf.concat(values, 0) if len(values) > 1 else values[0], sizes


def _by_feature(group: ListGroup, reduce: Callable) -> tf.Tensor:
    """``reduce`` (a segment reduction) of a group's values, feature by feature."""
    feats, values, sizes = group
    segments = tf.repeat(tf.range(len(feats), dtype=tf.int64), sizes)
    return reduce(values, segments, len(feats))


def _out_of_range(top: tf.Tensor, feats: list, tables: dict) -> tf.Tensor:
    """Which of ``feats`` have an id out of their table, from their largest ids as
    uint64 (a negative id is a value >= 2**63)."""
    bad = top >= tf.constant([tables[f.table].vocabulary_size for f in feats], tf.uint64)
    if any(f.out_of_range == "modulo" for f in feats):
        # modulo folds every id into the table, negative ones too (-1 -> vocab - 1).
        bad = tf.logical_and(bad, tf.constant([f.out_of_range == "error" for f in feats]))
    return bad


def _group_ok(group: ListGroup, tables: dict) -> tf.Tensor | None:
    """Whether every id of a group is in its table (None: nothing to check). Features
    of one table size, all strict, take one reduction over all their values; others
    one segment reduction per feature."""
    feats, values, _ = group
    if all(f.out_of_range == "modulo" for f in feats):
        return None
    vocab = {tables[f.table].vocabulary_size for f in feats}
    if len(vocab) == 1 and all(f.out_of_range == "error" for f in feats):
        # On an empty tensor reduce_max gives 0, which passes.
        return tf.reduce_max(tf.bitcast(values, tf.uint64)) < tf.constant(vocab.pop(), tf.uint64)
    top = _by_feature((feats, tf.bitcast(values, tf.uint64), group[2]), _segment_max)
    return tf.logical_not(tf.reduce_any(_out_of_range(top, feats, tables)))


def _segment_max(values: tf.Tensor, segments: tf.Tensor, n: int) -> tf.Tensor:
    # An empty segment's max is the type's smallest value: 0 for uint64, which passes.
    return tf.math.unsorted_segment_max(values, segments, n)


def _check_ids(
    stacked: tf.Tensor | None,
    singles: list[Categorical],
    lists: list[ListGroup],
    tables: dict,
) -> list[Check]:
    """One vectorized range check over every int64 id feature.

    Ids are reinterpreted as uint64, so a negative id becomes a value >= 2**63 and one
    max-reduction finds both negative and too-large ids. Single ids come stacked as one
    ``[k, B]`` matrix (one reduction for all of them); each group of multi-hot features
    adds one reduction over their concatenated values (`_group_ok`). Which feature
    failed, and its exact values, are computed only to explain a failure.
    """
    order = list(singles) + [f for feats, _, _ in lists for f in feats]
    oks = []
    if stacked is not None:
        top = tf.reduce_max(tf.bitcast(stacked, tf.uint64), axis=1)
        oks.append(tf.logical_not(tf.reduce_any(_out_of_range(top, singles, tables))))
    oks += [ok for ok in (_group_ok(g, tables) for g in lists) if ok is not None]
    if not oks:
        return []
    names = tf.constant([f.name for f in order])
    table_names = tf.constant([f.table for f in order])
    vocab = tf.constant([tables[f.table].vocabulary_size for f in order], tf.int64)

    def explain() -> tf.Tensor:
        los, his = [], []
        if stacked is not None:
            los.append(tf.reduce_min(stacked, axis=1))
            his.append(tf.reduce_max(stacked, axis=1))
        for group in lists:
            los.append(_by_feature(group, tf.math.unsorted_segment_min))
            his.append(_by_feature(group, tf.math.unsorted_segment_max))
        lo, hi = tf.concat(los, 0), tf.concat(his, 0)
        # An empty list's min is the largest int64 and its max the smallest: no failure.
        top = tf.where(lo < 0, tf.constant(-1, tf.int64), tf.maximum(hi, 0))
        bad = _out_of_range(tf.bitcast(top, tf.uint64), order, tables)
        i = tf.argmax(tf.cast(bad, tf.int32))
        lo, hi = lo[i], hi[i]
        prefix = ["feature '", names[i], "': "]
        bounds = ["expected ids in [0, ", _s(vocab[i]), ") (table '", table_names[i], "')"]
        neg = tf.strings.join([*prefix, "negative id; ", *bounds, ". Smallest id found: ", _s(lo)])
        big = tf.strings.join(
            [
                *prefix,
                "id out of range; ",
                *bounds,
                ", or set out_of_range='modulo'. Largest id found: ",
                _s(hi),
            ]
        )
        return tf.where(lo < 0, neg, big)

    return [(tf.reduce_all(tf.stack(oks)), explain)]


def _stack(values: list[tf.Tensor]) -> tf.Tensor:
    """``[n, B]``: one feature per row, so stacking and splitting again are contiguous
    copies and per-feature reductions run along rows (in a ``[B, n]`` layout both would
    be strided)."""
    return tf.stack(values, axis=0) if len(values) > 1 else tf.expand_dims(values[0], 0)


def _dense_scalars(
    feats: list[tuple[Dense, tf.Tensor]], guards: list, blocks: dict
) -> dict[str, tf.Tensor]:
    """Scalar dense features as one ``[n, B]`` matrix: one finiteness check, one clip
    and one log1p for all of them, then split again (the matrix is recorded in
    ``blocks`` for packing)."""
    if not feats:
        return {}
    x = _stack([v for _, v in feats])
    names = tf.constant([f.name for f, _ in feats])
    finite = tf.math.is_finite(x)

    def explain_finite() -> tf.Tensor:
        col = tf.argmin(tf.cast(tf.reduce_all(finite, axis=1), tf.int32))
        return tf.strings.join(
            [
                "feature '",
                names[col],
                "': NaN or inf in a dense feature; expected finite "
                "numbers (write missing values as absent, not NaN)",
            ]
        )

    guards.append((tf.reduce_all(finite), explain_finite))
    inf = float("inf")
    lows = [f.clip[0] if f.clip and f.clip[0] is not None else None for f, _ in feats]
    highs = [f.clip[1] if f.clip and f.clip[1] is not None else None for f, _ in feats]
    if any(v is not None for v in lows):
        x = tf.maximum(x, tf.constant([[-inf if v is None else v] for v in lows], tf.float32))
    if any(v is not None for v in highs):
        x = tf.minimum(x, tf.constant([[inf if v is None else v] for v in highs], tf.float32))
    logs = [f.log1p for f, _ in feats]
    if any(logs):
        # log1p can only see a value <= -1 where nothing clips below at > -1.
        risky = [f.log1p and (low is None or low <= -1) for (f, _), low in zip(feats, lows)]
        if any(risky):
            smallest = tf.reduce_min(x, axis=1)
            bad = tf.logical_and(tf.constant(risky), smallest <= -1.0)

            def explain_log() -> tf.Tensor:
                col = tf.argmax(tf.cast(bad, tf.int32))
                return tf.strings.join(
                    [
                        "feature '",
                        names[col],
                        '\': log1p needs values > -1; set "clip": '
                        "[0, null] in the schema. Smallest value found: ",
                        _s(smallest[col]),
                    ]
                )

            guards.append((tf.logical_not(tf.reduce_any(bad)), explain_log))
        mask = tf.constant([[v] for v in logs])
        x = tf.math.log1p(x) if all(logs) else tf.where(mask, tf.math.log1p(x), x)
    blocks.update({("dense", f.name): Block(x, i, 0) for i, (f, _) in enumerate(feats)})
    columns = tf.unstack(x, axis=0)
    return {f.name: c for (f, _), c in zip(feats, columns)}


def _finite_labels(labels: dict[str, tf.Tensor]) -> Check:
    """One finiteness check over every label (stacked ``[n, B]``)."""
    finite = tf.math.is_finite(_stack(list(labels.values())))
    names = tf.constant(list(labels))

    def explain() -> tf.Tensor:
        col = tf.argmin(tf.cast(tf.reduce_all(finite, axis=1), tf.int32))
        return tf.strings.join(
            ["label '", names[col], "': NaN or inf in a label; expected finite numbers"]
        )

    return (tf.reduce_all(finite), explain)


def _single_ids(
    feats: list[tuple[Categorical, tf.Tensor]], tables: dict, blocks: dict
) -> tuple[dict[str, tf.Tensor], tf.Tensor | None, list[Categorical]]:
    """Single-id features stacked per kind: int64 ids are folded and cast as one
    ``[k, B]`` matrix; strings sharing a bucket count are hashed by one op. The int32
    matrices are recorded in ``blocks`` for packing.

    Returns:
      ``(ids by name, the stacked int64 matrix or None, its features)``; the caller
      range-checks the matrix together with the multi-hot ids (`_check_ids`).
    """
    out: dict[str, tf.Tensor] = {}
    ints = [(f, v) for f, v in feats if f.dtype == "int64"]
    stacked = None
    if ints:
        stacked = _stack([tf.cast(v, tf.int64) for _, v in ints])
        ids = stacked
        if any(f.out_of_range == "modulo" for f, _ in ints):
            vocab = tf.constant([[tables[f.table].vocabulary_size] for f, _ in ints], tf.int64)
            ids = tf.math.floormod(stacked, vocab)  # identity on the checked strict rows
        # vocab <= 2**31 - 1 is enforced by Table, so the cast is exact.
        _split_rows(tf.cast(ids, tf.int32), [f for f, _ in ints], out, blocks)
    by_vocab: dict[int, list[tuple[Categorical, tf.Tensor]]] = {}
    for f, v in feats:
        if f.dtype == "string":
            by_vocab.setdefault(tables[f.table].vocabulary_size, []).append((f, v))
    for vocab, group in by_vocab.items():
        # FarmHash fingerprint modulo vocab: identical in training and serving graphs.
        hashed = tf.strings.to_hash_bucket_fast(_stack([v for _, v in group]), vocab)
        _split_rows(tf.cast(hashed, tf.int32), [f for f, _ in group], out, blocks)
    return out, stacked, [f for f, _ in ints]


def _split_rows(matrix: tf.Tensor, feats: list, out: dict, blocks: dict) -> None:
    """One ``[B]`` id tensor per row of an ``[k, B]`` matrix, and its `Block`."""
    for i, (f, c) in enumerate(zip(feats, tf.unstack(matrix, axis=0))):
        out[f.name] = c
        blocks[("ids", f.name)] = Block(matrix, i, 0)


def _finite(x: tf.Tensor, f: Dense, guards: list) -> tf.Tensor:
    """``x``, checked for NaN and inf (a `guard`, not ``tf.debugging.check_numerics``:
    CheckNumerics is a stateful op, which would make the pipeline's iterator refuse to
    be checkpointed)."""
    guards.append(
        (
            tf.reduce_all(tf.math.is_finite(x)),
            lambda: tf.constant(
                f"feature '{f.name}': NaN or inf in a dense feature; expected finite numbers "
                "(write missing values as absent, not NaN)"
            ),
        )
    )
    return x


def _to_ids(values: tf.Tensor, feature: Categorical | MultiHot, vocab: int) -> tf.Tensor:
    """Map raw values (int64 or string, any shape) to int32 ids in ``[0, vocab)``.
    Int ids are range-checked separately (`_check_ids`)."""
    if feature.dtype == "string":
        # FarmHash fingerprint modulo vocab: identical in training and serving graphs.
        ids = tf.strings.to_hash_bucket_fast(values, vocab)
    elif feature.out_of_range == "modulo":
        ids = tf.math.floormod(values, vocab)
    else:
        ids = values
    # vocab <= 2**31 - 1 is enforced by Table, so the cast is exact.
    return tf.cast(ids, tf.int32)


def _dense_vector(x: tf.Tensor, f: Dense, guards: list) -> tf.Tensor:
    """A vector dense feature ``[B, length]`` (rare enough to be handled alone)."""
    x = _finite(x, f, guards)
    if f.clip is not None:
        lo, hi = f.clip
        if lo is not None:
            x = tf.maximum(x, lo)
        if hi is not None:
            x = tf.minimum(x, hi)
    if f.log1p:
        low = f.clip[0] if f.clip is not None else None
        if low is None or low <= -1:  # only then can log1p see a value <= -1
            smallest = tf.reduce_min(x)
            guards.append(
                (
                    smallest > -1.0,
                    lambda: tf.strings.join(
                        [
                            f"feature '{f.name}': log1p needs values > -1; set \"clip\": [0, null] in "
                            "the schema. Smallest value found: ",
                            _s(smallest),
                        ]
                    ),
                )
            )
        x = tf.math.log1p(x)
    return x


def _multi_hot(
    ids: tf.RaggedTensor,
    weights: tf.RaggedTensor | None,
    f: MultiHot,
    vocab: int,
    batch: int | None,
    fmt: str,
) -> tuple[Any, Any]:
    """Ids and weights (already truncated to ``max_len``) as ``ragged`` or ``sparse``
    tensors (`transform_batch` pads the ``dense`` format itself, in one op)."""
    ids = ids.with_values(_to_ids(ids.values, f, vocab))
    if weights is None:
        weights = tf.ones_like(ids, dtype=tf.float32)
    if fmt == "ragged":
        return ids, weights
    rows = ids.nrows() if batch is None else batch
    dense_shape = tf.stack([tf.cast(rows, tf.int64), tf.constant(f.max_len, tf.int64)])
    sp_ids = ids.to_sparse()
    sp_w = weights.to_sparse()
    return (
        tf.SparseTensor(sp_ids.indices, sp_ids.values, dense_shape),
        tf.SparseTensor(sp_w.indices, sp_w.values, dense_shape),
    )


def _weight_guards(f: MultiHot, value: tf.RaggedTensor, w: tf.RaggedTensor) -> list[Check]:
    """Weights of a multi-hot feature are finite and one per id in every row."""
    finite = (
        tf.reduce_all(tf.math.is_finite(w.values)),
        lambda: tf.constant(
            f"feature '{f.name}': NaN or inf in weights column '{f.weights}'; "
            "expected finite numbers"
        ),
    )
    same = (
        tf.reduce_all(tf.equal(value.row_lengths(), w.row_lengths())),
        lambda: tf.constant(
            f"feature '{f.name}': weights column '{f.weights}' has a different "
            "number of values than the ids in some row"
        ),
    )
    return [finite, same]


#: Fewest multi-hot features sharing ``max_len`` padded as one block (fewer: one by one,
#: as the block's concatenation costs more than it saves; docs/bench.md, wide schemas).
MIN_LIST_BLOCK = 8


def _blocks(feats: list[MultiHot]) -> list[list[MultiHot]]:
    return [feats] if len(feats) >= MIN_LIST_BLOCK else [[f] for f in feats]


def _pad_lists(
    raw: dict[str, Any],
    schema: Schema,
    tables: dict,
    batch_size: int | None,
    out: tuple[dict, dict],
    blocks: dict | None,
) -> list[ListGroup]:
    """Multi-hot ids and weights padded to ``[B, max_len]`` (the ``dense`` format): the
    ``k`` features sharing ``max_len`` (at least `MIN_LIST_BLOCK`) are one ragged tensor
    of ``k * B`` rows, feature after feature: one ``to_tensor(shape=...)`` pads and
    truncates them all (longer lists keep their first ``max_len`` ids), one cast turns
    their int64 ids into int32, one ``sequence_mask`` gives the weights of those without
    a weights column; the ``[k, B, max_len]`` results are then split by feature. With
    ``blocks`` (the packed layout) the blocks are recorded for packing, so no
    per-feature tensor is concatenated again.

    Returns:
      The int64 ids of each group, for the range check (`_check_ids`).
    """
    ids, weights = out
    checks: list[ListGroup] = []
    by_width: dict[int, list[MultiHot]] = {}
    for f in schema.multi_hot:
        by_width.setdefault(f.max_len, []).append(f)
    for width, feats in [(w, part) for w, fs in by_width.items() for part in _blocks(fs)]:
        lists = [raw[f.source] for f in feats]
        # Every list of a batch has B rows: their row splits stack into one [k, B + 1].
        splits = tf.stack([tf.cast(v.row_splits, tf.int64) for v in lists])
        lengths_kb = splits[:, 1:] - splits[:, :-1]
        ints = [(f, v.values) for f, v in zip(feats, lists) if f.dtype == "int64"]
        if ints:
            sizes = splits[:, -1] if len(ints) == len(feats) else None
            checks.append(_list_group([f for f, _ in ints], [v for _, v in ints], sizes))
        if len(ints) == len(feats) and all(f.out_of_range == "error" for f in feats):
            flat = tf.cast(checks[-1][1], tf.int32)  # checked ids: the cast is exact
        else:
            vocab = [tables[f.table].vocabulary_size for f in feats]
            flat = tf.concat([_to_ids(v.values, f, n) for f, v, n in zip(feats, lists, vocab)], 0)
        k = len(feats)
        rows = lists[0].nrows() if batch_size is None else batch_size
        lengths = tf.reshape(lengths_kb, [-1])  # [k * B]
        padded = tf.RaggedTensor.from_row_lengths(flat, lengths, validate=False).to_tensor(
            0, shape=[None if batch_size is None else k * batch_size, width]
        )
        id_block = tf.reshape(padded, tf.stack([k, tf.cast(rows, tf.int32), width]))
        if batch_size is not None:
            id_block = tf.ensure_shape(id_block, [k, batch_size, width])
        masked = [i for i, f in enumerate(feats) if not f.weights]
        mask_block = None
        if masked:
            mask_block = tf.sequence_mask(lengths_kb, width, dtype=tf.float32)
        id_rows, mask_rows = (
            tf.unstack(id_block),
            (tf.unstack(mask_block) if mask_block is not None else []),
        )
        for i, f in enumerate(feats):
            ids[f.name] = id_rows[i]
            if f.weights:
                weights[f.name] = raw[f.weights].to_tensor(0.0, shape=[batch_size, width])
            else:
                weights[f.name] = mask_rows[i]
        if blocks is not None:
            slabs = tf.transpose(id_block, [1, 0, 2])  # [B, k, width]: a slab per feature
            blocks.update({("ids", f.name): Block(slabs, i, 1) for i, f in enumerate(feats)})
            if mask_block is not None:
                mask_slabs = tf.transpose(mask_block, [1, 0, 2])
                blocks.update({("weights", feats[i].name): Block(mask_slabs, i, 1) for i in masked})
    return checks


def _stamp_batch_size(groups: Sequence[dict[str, Any]], batch_size: int) -> None:
    """Give every dense tensor of ``groups`` the static batch dimension, in place."""
    for group in groups:
        for key, value in group.items():
            if isinstance(value, tf.Tensor) and not value.shape.is_fully_defined():
                group[key] = tf.ensure_shape(value, [batch_size] + value.shape.as_list()[1:])


def transform_batch(
    raw: dict[str, Any],
    schema: Schema,
    *,
    batch_size: int | None,
    multi_hot_format: str = "dense",
    layout: PackedLayout | None = None,
) -> tuple[Any, Any]:
    """Turn a raw batch into ``(features, labels)``; see the module docstring.

    Args:
      raw: Raw batch keyed by source column.
      schema: The schema.
      batch_size: Static batch size to stamp on every output (None if the last batch
        may be partial).
      multi_hot_format: ``dense``, ``sparse`` or ``ragged`` for multi-hot outputs.
      layout: Emit the packed layout (`tfinput.layout.pack`) instead of per-feature
        tensors; needs the ``dense`` multi-hot format. Packing is fused with the
        transforms: features are copied as whole blocks from the matrices they were
        checked in.
    """
    if layout is not None and multi_hot_format != "dense":
        raise ConfigError(
            f'multi_hot_format: the packed layout needs "dense", got {multi_hot_format!r}'
        )
    tables = {t.name: t for t in schema.tables}
    weights: dict[str, Any] = {}
    guards: list[Check] = []
    blocks: dict = {}
    scalars = [(f, tf.cast(raw[f.source], tf.float32)) for f in schema.dense if f.length is None]
    dense = _dense_scalars(scalars, guards, blocks)
    for f in schema.dense:
        if f.length is not None:
            dense[f.name] = _dense_vector(tf.cast(raw[f.source], tf.float32), f, guards)
    singles = [(f, raw[f.source]) for f in schema.features if isinstance(f, Categorical)]
    ids, stacked, int_singles = _single_ids(singles, tables, blocks)
    list_checks: list[ListGroup] = []
    for f in schema.multi_hot:
        value = raw[f.source]
        w = raw[f.weights] if f.weights else None
        if w is not None:
            guards += _weight_guards(f, value, w)
        if multi_hot_format == "dense":  # padded below; every id is range-checked
            continue
        if w is not None:
            w = w[:, : f.max_len]
        value = value[:, : f.max_len]  # longer lists keep their first max_len ids
        if f.dtype == "int64":
            list_checks.append(_list_group([f], [value.values]))
        vocab = tables[f.table].vocabulary_size
        ids[f.name], weights[f.name] = _multi_hot(value, w, f, vocab, batch_size, multi_hot_format)
    if multi_hot_format == "dense":
        list_checks += _pad_lists(
            raw, schema, tables, batch_size, (ids, weights), blocks if layout else None
        )
    guards += _check_ids(stacked, int_singles, list_checks, tables)
    # Outputs in schema order, whatever order the stacked groups produced them in.
    dense = {f.name: dense[f.name] for f in schema.dense}
    ids = {f.name: ids[f.name] for f in schema.categorical}
    weights = {f.name: weights[f.name] for f in schema.multi_hot}
    labels = {lab.name: tf.cast(raw[lab.source], tf.float32) for lab in schema.labels}
    if labels:
        guards.append(_finite_labels(labels))
    # The guard is a stateful op: a tf.function (and so a tf.data map) runs it as a
    # control output and returns only after it passes, so no identity ops are needed
    # to hold a bad batch back (tests/test_bad_input.py proves it).
    guard_all(guards)
    features: dict[str, Any] = {"dense": dense, "ids": ids, "weights": weights}
    if layout is not None:
        features = pack(features, layout, blocks=blocks)
        groups = (features, labels)
    else:
        groups = (dense, ids, weights, labels)
    if batch_size is not None:
        _stamp_batch_size(groups, batch_size)
    out_labels: Any = labels
    if len(schema.labels) == 1:
        out_labels = labels[schema.labels[0].name]
    return features, out_labels
