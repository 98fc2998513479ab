"""Decoding batches of columnar chunks: the parse spec of a chunk record and the
assembly of its columns into tensors (`assembler`). The columnar source reads through
`tfinput._src.core.columnar.reader`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.core.columnar.format import (
    CHECK_KEY,
    FORMAT_VERSION,
    LENGTHS_SUFFIX,
    ROWS_KEY,
    VERSION_KEY,
    Column,
    payload_keys,
)

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf


#: A decoded batch of raw columns (dense tensors, or ragged ones for list columns).
Raw = dict[str, Any]


def assembler(
    wanted: Sequence[Column], stored: Sequence[Column], *, verify: bool, uniform: bool
) -> Callable[[tf.Tensor], Raw]:
    """The decode function: a batch of ``k`` serialized chunks -> one raw batch.

    Args:
      wanted: The columns the schema reads (`storage_columns`).
      stored: The columns the files store, in record order (the manifest's).
      verify: Check each chunk's checksums, format version and manifest digest; the
        input is then the dict `read_chunks` yields with ``verify=True``.
      uniform: Every chunk holds exactly ``chunk_rows`` rows, so fixed-width columns
        decode straight from the ``[k]`` strings without joining them first.

    Returns:
      A function of a ``[k]`` batch of records (or of dicts holding them) to a dict of
      raw columns, decoded with the stored dtypes.
    """
    import tensorflow as tf

    stored_by_name = {c.name: c for c in stored}
    columns = [stored_by_name[w.name] for w in wanted]  # decode as stored
    spec = _parse_spec(columns, verify=verify)
    groups = _scalar_groups(columns) if uniform else {}
    check = _chunk_checker(columns, stored) if verify else None

    def assemble(encoded: tf.Tensor) -> Raw:
        records = encoded["record"] if isinstance(encoded, dict) else encoded
        parsed = tf.io.parse_example(records, spec)
        raw = _decode_columns(parsed, columns, groups, uniform=uniform)
        if check is not None:
            check(encoded, parsed)
        return raw

    return assemble


def _tf_dtype(dtype: str) -> tf.DType:
    import tensorflow as tf

    return {"float32": tf.float32, "int64": tf.int64}[dtype]


def _parse_spec(columns: Sequence[Column], *, verify: bool) -> dict[str, tf.io.FixedLenFeature]:
    """The ``parse_example`` spec: one scalar string per numeric key, strings ragged."""
    import tensorflow as tf

    spec: dict[str, tf.io.FixedLenFeature] = {ROWS_KEY: tf.io.FixedLenFeature([], tf.int64)}
    for c in columns:
        if c.dtype == "string":
            spec[c.name] = tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
        else:
            spec[c.name] = tf.io.FixedLenFeature([], tf.string)
        if c.layout == "list":
            spec[c.name + LENGTHS_SUFFIX] = tf.io.FixedLenFeature([], tf.string)
    if verify:
        spec[CHECK_KEY] = tf.io.FixedLenFeature([], tf.string)
        spec[VERSION_KEY] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _scalar_groups(columns: Sequence[Column]) -> dict[str, list[Column]]:
    """Scalar fixed-width numeric columns by dtype, for dtypes with several of them.

    Such columns decode together: one ``decode_raw`` of the stacked ``[n, k]`` strings
    instead of ``n`` ops (per-op overhead, not bytes, dominates at ~1M examples/s).
    """
    groups: dict[str, list[Column]] = {}
    for c in columns:
        if c.dtype != "string" and c.layout == "fixed" and c.width is None:
            groups.setdefault(c.dtype, []).append(c)
    return {dtype: cs for dtype, cs in groups.items() if len(cs) > 1}


def _flat(x: tf.Tensor, dtype: tf.DType, *, same_length: bool) -> tf.Tensor:
    """The values of a ``[k]`` batch of raw strings, concatenated."""
    import tensorflow as tf

    if same_length:  # one decode of the [k] strings, no copy into one string first
        return tf.reshape(tf.io.decode_raw(x, dtype), [-1])
    return tf.io.decode_raw(tf.strings.reduce_join(x), dtype)


def _decode_columns(
    parsed: dict[str, tf.Tensor],
    columns: Sequence[Column],
    groups: dict[str, list[Column]],
    *,
    uniform: bool,
) -> Raw:
    """Parsed record strings -> one raw tensor per column (ragged for list columns)."""
    import tensorflow as tf

    raw: Raw = {}
    for dtype, cs in groups.items():
        stacked = tf.stack([parsed[c.name] for c in cs])  # [n, k]
        decoded = tf.reshape(tf.io.decode_raw(stacked, _tf_dtype(dtype)), [len(cs), -1])
        raw.update(zip((c.name for c in cs), tf.unstack(decoded)))
    grouped = {c.name for cs in groups.values() for c in cs}
    for c in columns:
        if c.name in grouped:
            continue
        value = parsed[c.name]
        if c.dtype == "string":
            values = value.flat_values
        else:
            values = _flat(value, _tf_dtype(c.dtype), same_length=uniform and c.layout == "fixed")
        if c.layout == "list":
            lengths = _flat(parsed[c.name + LENGTHS_SUFFIX], tf.int32, same_length=uniform)
            raw[c.name] = tf.RaggedTensor.from_row_lengths(
                values, tf.cast(lengths, tf.int64), validate=False
            )
        elif c.width is not None:
            raw[c.name] = tf.reshape(values, [-1, c.width])
        else:
            raw[c.name] = values
    return raw


# ----------------------------------------------------------------- rebatch
#: Key prefix of the packed tensors `rebatch_codec` hands to ``rebatch``.
PACKED = "@packed/"


def rebatch_codec(
    wanted: Sequence[Column], stored: Sequence[Column]
) -> tuple[Callable[[Raw], Raw], Callable[[Raw], Raw]]:
    """``(pack, unpack)``: a decoded batch as a few tensors for ``rebatch`` to cut, and
    the cut batches back as one tensor per column.

    ``rebatch`` costs per tensor of its elements (a ragged tensor's rows even one
    variant each), so a batch of a thousand columns is cut as: the scalar numeric
    columns of a dtype stacked ``[rows, n]``, and the list columns of a dtype as one
    ragged tensor (row ``r`` holds row ``r`` of every list, column after column) with
    their ``[rows, n]`` row lengths. ``unpack`` restores each column's values exactly
    (one gather puts the lists' values back column by column). Other columns (strings,
    fixed vectors) pass as they are.
    """
    import tensorflow as tf

    stored_by_name = {c.name: c for c in stored}
    columns = [stored_by_name[w.name] for w in wanted]
    scalars: dict[str, list[str]] = {}
    lists: dict[str, list[str]] = {}
    for c in columns:
        if c.dtype == "string":
            continue
        if c.layout == "fixed" and c.width is None:
            scalars.setdefault(c.dtype, []).append(c.name)
        elif c.layout == "list":
            lists.setdefault(c.dtype, []).append(c.name)
    packed = {n for names in (*scalars.values(), *lists.values()) for n in names}

    def pack(raw: Raw) -> Raw:
        out = {k: v for k, v in raw.items() if k not in packed}
        for dtype, names in scalars.items():
            out[f"{PACKED}{dtype}"] = tf.stack([raw[n] for n in names], axis=1)
        for dtype, names in lists.items():
            ragged = [raw[n] for n in names]
            lengths = tf.stack([r.row_lengths() for r in ragged], axis=1)  # [rows, n]
            out[f"{PACKED}lengths/{dtype}"] = lengths
            out[f"{PACKED}list/{dtype}"] = (
                _join_lists([r.values for r in ragged], lengths) if len(ragged) > 1 else ragged[0]
            )
        return out

    def unpack(cut: Raw) -> Raw:
        raw = {k: v for k, v in cut.items() if not k.startswith(PACKED)}
        for dtype, names in scalars.items():
            raw.update(zip(names, tf.unstack(cut[f"{PACKED}{dtype}"], num=len(names), axis=1)))
        for dtype, names in lists.items():
            combined = cut[f"{PACKED}list/{dtype}"]
            if len(names) == 1:
                raw[names[0]] = combined
                continue
            raw.update(_split_lists(combined.flat_values, cut[f"{PACKED}lengths/{dtype}"], names))
        return {c.name: raw[c.name] for c in columns}

    return pack, unpack


def _join_lists(values: Sequence[tf.Tensor], lengths: tf.Tensor) -> tf.RaggedTensor:
    """List columns (each one's flat values, and their ``[rows, n]`` row lengths) as
    one ragged tensor whose row ``r`` holds row ``r`` of every column, column after
    column: one gather (``tf.concat(axis=1)`` of ragged tensors costs ops per column)."""
    import tensorflow as tf

    flat = tf.concat(values, 0)  # column after column
    columns = tf.reduce_sum(lengths, axis=0)
    starts = tf.cumsum(columns, exclusive=True)[None, :] + tf.cumsum(lengths, exclusive=True)
    first = tf.reshape(starts, [-1])  # row after row, each row column after column
    order = tf.ragged.range(first, first + tf.reshape(lengths, [-1])).flat_values
    return tf.RaggedTensor.from_row_lengths(
        tf.gather(flat, order), tf.reduce_sum(lengths, axis=1), validate=False
    )


def _split_lists(values: tf.Tensor, lengths: tf.Tensor, names: Sequence[str]) -> Raw:
    """The list columns of `rebatch_codec`'s combined ragged tensor: ``values`` (row
    after row, each row column after column) and ``lengths`` ``[rows, n]``."""
    import tensorflow as tf

    k = len(names)
    starts = tf.reshape(tf.cumsum(tf.reshape(lengths, [-1]), exclusive=True), [-1, k])
    by_column = tf.transpose(lengths)  # [n, rows]
    first = tf.reshape(tf.transpose(starts), [-1])
    ordered = tf.gather(
        values, tf.ragged.range(first, first + tf.reshape(by_column, [-1])).flat_values
    )
    pieces = tf.split(ordered, tf.reduce_sum(by_column, axis=1), num=k)
    rows = tf.unstack(by_column, num=k)
    return {
        n: tf.RaggedTensor.from_row_lengths(p, r, validate=False)
        for n, p, r in zip(names, pieces, rows)
    }


# ------------------------------------------------------------------ verify
def _chunk_checker(
    columns: Sequence[Column], stored: Sequence[Column]
) -> Callable[[dict[str, tf.Tensor], dict[str, tf.Tensor]], None]:
    """The in-graph integrity check of a batch of chunks: each read column's payload
    against its ``@check`` slot, the format version, and ``@check`` against the
    manifest digest. A failure raises `DataError` naming the file, chunk and column."""
    import tensorflow as tf

    from tfinput._src.core.transforms import guard

    all_keys = payload_keys(stored)
    keys = [k for c in columns for k in c.keys]
    slots = [all_keys.index(k) for k in keys]
    string_keys = {c.name for c in columns if c.dtype == "string"}

    def check(encoded: dict[str, tf.Tensor], parsed: dict[str, tf.Tensor]) -> None:
        k = tf.shape(parsed[CHECK_KEY])[0]
        stored_check = tf.reshape(tf.io.decode_raw(parsed[CHECK_KEY], tf.uint8), [k, -1, 8])
        expected = tf.gather(stored_check, slots, axis=1)  # [k, keys, 8]
        # One fingerprint op over every payload string ([keys, k] -> [keys * k, 8]).
        payloads = []
        for key in keys:
            value = parsed[key]
            if key in string_keys:
                value = tf.strings.reduce_join(value, axis=1)
            payloads.append(value)
        prints = tf.fingerprint(tf.reshape(tf.stack(payloads), [-1]))
        computed = tf.transpose(tf.reshape(prints, [len(keys), k, 8]), [1, 0, 2])
        same = tf.reduce_all(tf.equal(computed, expected), axis=2)  # [k, keys]
        digest = tf.bitcast(tf.fingerprint(parsed[CHECK_KEY]), tf.int64)
        version_ok = tf.equal(parsed[VERSION_KEY], FORMAT_VERSION)
        digest_ok = tf.equal(digest, encoded["digest"])
        chunk_ok = tf.reduce_all(same, axis=1) & version_ok & digest_ok
        names = tf.constant([k.replace(LENGTHS_SUFFIX, " (row lengths)") for k in keys])

        def explain() -> tf.Tensor:
            return _mismatch_message(encoded, parsed, chunk_ok, same, version_ok, names)

        guard(tf.reduce_all(chunk_ok), explain)

    return check


def _mismatch_message(
    encoded: dict[str, tf.Tensor],
    parsed: dict[str, tf.Tensor],
    chunk_ok: tf.Tensor,
    same: tf.Tensor,
    version_ok: tf.Tensor,
    names: tf.Tensor,
) -> tf.Tensor:
    """The message naming the first bad chunk: its file, index and what is wrong."""
    import tensorflow as tf

    i = tf.argmin(tf.cast(chunk_ok, tf.int32))
    column = names[tf.argmin(tf.cast(same[i], tf.int32))]
    reason = tf.where(
        tf.logical_not(version_ok[i]),
        tf.strings.join(
            [
                "format version ",
                tf.strings.as_string(parsed[VERSION_KEY][i]),
                f", this tfinput reads {FORMAT_VERSION}",
            ]
        ),
        tf.where(
            tf.reduce_all(same[i]),
            tf.constant(
                "its checksums do not match the manifest digest: the file was "
                "replaced or rewritten after manifest.json was written"
            ),
            tf.strings.join(
                ["column '", column, "' does not match its checksum: the chunk is corrupt"]
            ),
        ),
    )
    return tf.strings.join(
        [encoded["path"][i], ": chunk ", tf.strings.as_string(encoded["chunk"][i]), ": ", reason]
    )
