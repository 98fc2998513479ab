"""`tfinput._src.core.columnar.reader`: the native read path (chunk plan, batch assembly
with or without rebatching, shuffling levels, in-graph integrity checks)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import SEQUENTIAL, assert_each_row_once, by_row_id, collect
from tfinput import testing
from tfinput._src.core.columnar._decode import assembler
from tfinput._src.core.columnar.reader import (
    chunk_buffer,
    index_chunks,
    permutation_key,
    permutation_keys,
    plan_chunks,
    read_permuted_chunks,
    row_window,
)
from tfinput._src.core.columnar.writer import verify_files
from tfinput.columnar_records import read_manifest, storage_columns
from tfinput.config import PipelineConfig
from tfinput.errors import DataError


def _batches(ds):
    """Every batch as nested numpy arrays (dense output format)."""
    out = []
    for features, label in ds:
        flat = {f"{g}/{n}": t.numpy() for g, d in features.items() for n, t in d.items()}
        flat["label"] = label.numpy()
        out.append(flat)
    return out


def _assert_same_batches(got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"batch {i}, {key}")
            assert a[key].dtype == b[key].dtype, key


# ------------------------------------------------------------ the plan
@pytest.mark.parametrize(("skip_partial", "takes"), [(False, [3, 3, 3, 1]), (True, [3, 3, 3])])
def test_plan_chunks_leaves_out_a_partial_last_chunk_only_when_asked(
    tmp_path, small_schema, skip_partial, takes
):
    files = testing.write_columnar(tmp_path, small_schema, rows=950, files=4, chunk_rows=100)
    m = read_manifest(files[0])
    chosen = [(p, m, e) for p, e in zip(m.paths, m.files)]
    plan = plan_chunks(chosen, chunk_rows=100, skip_partial=skip_partial)
    assert [f.rows for f in m.files] == [300, 300, 300, 50]
    assert plan.takes == takes and plan.paths == m.paths[: len(takes)]
    assert [d.tolist() for d in plan.digests] == [
        np.frombuffer(bytes.fromhex("".join(e.digests[:n])), "=i8").tolist()
        for e, n in zip(m.files, takes)
    ]


@pytest.mark.parametrize(("rows", "chunks"), [(1, 2), (100, 2), (201, 3), (1000, 10)])
def test_chunk_buffer_rounds_rows_up_to_chunks_at_least_two(rows, chunks):
    assert chunk_buffer(rows, 100) == chunks  # one chunk would hand each on as it comes


@pytest.mark.parametrize(
    ("shuffle_buffer", "batch", "rows", "window"),
    [
        (0, 50, True, 0),  # no shuffle
        (10, 50, False, 2),  # batches under two chunks: windows of two chunks at least
        (100, 100, False, 2),
        (1000, 199, False, 10),  # the chunk buffer
        (1000, 200, False, 0),  # whole chunks from the buffer
        (10, 400, True, 8),  # shuffle_rows: windows of two batches at least
        (1000, 400, True, 10),
    ],
)
def test_row_windows_under_two_chunks_or_with_shuffle_rows(shuffle_buffer, batch, rows, window):
    assert row_window(shuffle_buffer, batch_size=batch, chunk_rows=100, rows=rows) == window


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform", "joined"])
def test_assembler_decodes_chunks_into_raw_columns(small_columnar, small_columns, uniform):
    m = read_manifest(small_columnar[0])
    records = list(tf.data.TFRecordDataset(small_columnar[0]).take(2).as_numpy_iterator())
    columns = storage_columns(m.schema)
    raw = assembler(columns, m.columns, verify=False, uniform=uniform)(tf.constant(records))
    np.testing.assert_array_equal(raw["row_id"].numpy(), small_columns.values["row_id"][:200])
    history = raw["history"]
    assert isinstance(history, tf.RaggedTensor) and history.nrows() == 200
    np.testing.assert_array_equal(
        history.row_lengths().numpy(), small_columns.lengths["history"][:200]
    )
    assert raw["embedding"].shape == (200, 3)


# ------------------------------------------------------------- equivalence
@pytest.mark.parametrize(
    ("batch", "drop"),
    [(200, True), (300, False), (100, True), (64, True), (250, False)],
    ids=["2-chunks", "3-chunks-keep-tail", "1-chunk", "rebatch-64", "rebatch-250-keep-tail"],
)
def test_batches_identical_to_tfrecord_and_parquet(
    batch, drop, small_schema, small_tfrecord, small_parquet, small_columnar
):
    config = PipelineConfig(batch_size=batch, drop_remainder=drop, **SEQUENTIAL)
    got = _batches(tfinput.columnar(small_columnar, small_schema).build(config))
    _assert_same_batches(
        got, _batches(tfinput.tfrecord(small_tfrecord, small_schema).build(config))
    )
    _assert_same_batches(got, _batches(tfinput.parquet(small_parquet, small_schema).build(config)))
    assert len(got) == (1000 // batch if drop else -(-1000 // batch))


def test_rows_identical_to_tfrecord_and_parquet_in_any_order(
    small_schema, small_tfrecord, small_parquet, small_columnar
):
    parallel = PipelineConfig(
        batch_size=300,
        drop_remainder=False,
        interleave_cycle_length=2,
        interleave_parallelism=2,
        map_parallelism=2,
        deterministic=False,
        shuffle_buffer=500,
    )
    got = by_row_id(collect(tfinput.columnar(small_columnar).with_file_shuffling().build(parallel)))
    naive = PipelineConfig.naive(batch_size=100, drop_remainder=False)
    for other in (
        tfinput.tfrecord(small_tfrecord, small_schema),
        tfinput.parquet(small_parquet, small_schema),
    ):
        want = by_row_id(collect(other.build(naive)))
        for group in want:
            for name, expected in want[group].items():
                np.testing.assert_array_equal(got[group][name], expected, err_msg=name)


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_sparse_and_ragged_outputs_match_tfrecord(
    fmt, small_schema, small_tfrecord, small_columnar
):
    config = PipelineConfig(batch_size=200, **SEQUENTIAL)
    col = tfinput.columnar(small_columnar).with_multi_hot_format(fmt).build(config)
    ref = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format(fmt).build(config)
    for (a, _), (b, _) in zip(col, ref):
        for name in ("history", "tags"):
            x, y = a["ids"][name], b["ids"][name]
            if fmt == "sparse":
                np.testing.assert_array_equal(x.indices.numpy(), y.indices.numpy())
                np.testing.assert_array_equal(x.values.numpy(), y.values.numpy())
            else:
                assert x.to_list() == y.to_list()


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "nondeterministic"])
@pytest.mark.parametrize("pipelines", [1, 3], ids=["1-pipeline", "3-pipelines"])
@pytest.mark.parametrize("batch", [300, 96], ids=["whole-chunks", "rebatch"])
def test_every_example_exactly_once(
    batch, pipelines, deterministic, small_schema, small_columns, small_columnar
):
    pipeline = tfinput.columnar(small_columnar, shuffle_rows=True).with_file_shuffling()
    config = PipelineConfig(
        batch_size=batch,
        drop_remainder=False,
        interleave_cycle_length=2,
        interleave_parallelism=2,
        deterministic=deterministic,
        shuffle_buffer=300,
        shuffle_seed=3,
    )
    parts = []
    for i in range(pipelines):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=i, num_replicas_in_sync=pipelines
        )
        parts.append(collect(pipeline.build(config, input_context=ctx if pipelines > 1 else None)))
    assert_each_row_once(parts, small_columns, small_schema)


def test_partial_last_chunk_is_skipped_only_with_whole_chunk_batches(tmp_path, small_schema):
    files = testing.write_columnar(tmp_path, small_schema, rows=450, chunk_rows=100)
    pipeline = tfinput.columnar(files)
    rows = collect(pipeline.build(PipelineConfig(batch_size=200)))["dense"]["row_id"]
    assert rows.tolist() == list(range(400))  # chunk 4 (50 rows) cannot fill a batch
    kept = collect(pipeline.build(PipelineConfig(batch_size=200, drop_remainder=False)))
    assert kept["dense"]["row_id"].tolist() == list(range(450))
    exact = collect(pipeline.build(PipelineConfig(batch_size=150)))  # rebatch path
    assert exact["dense"]["row_id"].tolist() == list(range(450))


# ---------------------------------------------------------------- shuffling
def _order(pipeline, config):
    return [f["dense"]["row_id"].numpy().astype(int) for f, _ in pipeline.build(config)]


def test_shuffling_levels(small_columnar):
    base = tfinput.columnar(small_columnar)
    config = PipelineConfig(batch_size=200, shuffle_seed=5, **SEQUENTIAL)
    plain = _order(base, config)
    assert np.concatenate(plain).tolist() == list(range(1000))
    # file order: files move as a whole, chunks stay in order within them
    by_file = np.concatenate(_order(base.with_file_shuffling(), config))
    assert sorted(by_file.tolist()) == list(range(1000)) and by_file.tolist() != list(range(1000))
    # chunk order: every batch is two whole chunks (100 consecutive rows each)
    by_chunk = _order(base, config.replace(shuffle_buffer=1000))
    chunks = [b[i : i + 100] for b in by_chunk for i in (0, 100)]
    assert all(c[0] % 100 == 0 and (np.diff(c) == 1).all() for c in chunks)
    assert [c[0] for c in chunks] != sorted(c[0] for c in chunks)
    # rows within a batch: same rows per batch as without, in another order
    within = _order(tfinput.columnar(small_columnar, shuffle_rows=True), config)
    assert [sorted(b.tolist()) for b in within] == [b.tolist() for b in plain]
    assert any(b.tolist() != sorted(b.tolist()) for b in within)
    # seeded: the same seed gives the same order
    again = _order(tfinput.columnar(small_columnar, shuffle_rows=True), config)
    assert all((a == b).all() for a, b in zip(within, again))


def test_a_shuffle_of_batches_under_two_chunks_mixes_the_rows_of_a_window(small_columnar):
    base = tfinput.columnar(small_columnar)
    config = PipelineConfig(batch_size=50, shuffle_buffer=100, shuffle_seed=5, **SEQUENTIAL)
    batches = _order(base, config)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    # windows of two chunks (200 rows; the last file's one chunk joins the window before
    # it): every batch holds rows of both chunks of its window, in no order
    assert all(len(np.unique(b // 100)) == 2 for b in batches)
    assert all(b.tolist() != sorted(b.tolist()) for b in batches)
    again = _order(base, config)  # seeded: the same order
    assert all((a == b).all() for a, b in zip(batches, again))


# ----------------------------------------------------------- global shuffle
def test_chunks_read_by_offset_in_a_permutation(small_columnar):
    from tfinput._src.core.columnar.format import read_manifest as manifest_of

    manifest = manifest_of(small_columnar[0])
    chosen = [(p, manifest, manifest.entry(p)) for p in small_columnar]
    plan = plan_chunks(chosen, chunk_rows=100, skip_partial=False)
    index = index_chunks(plan, chosen)
    assert len(index) == 10 and index.size.sum() == sum(e.bytes for _, _, e in chosen)
    stored = {r.numpy() for r in tf.data.TFRecordDataset(small_columnar)}
    keys = permutation_keys(5)
    for iteration in range(2):
        key = permutation_key(5, iteration)
        assert int(next(iter(keys))) == key, "a fresh generator replays the keys"
        read = read_permuted_chunks(
            index, seed=None, parallelism=None, deterministic=True, buffer_size=None,
            start=(key, 3),
        )  # fmt: skip
        got = list(read.as_numpy_iterator())
        assert [e["position"] for e in got] == list(range(3, 10))
        assert {e["record"] for e in got} < stored
        full = read_permuted_chunks(
            index, seed=None, parallelism=2, deterministic=True, buffer_size=None,
            start=(key, 0),
        )  # fmt: skip
        records = [e["record"] for e in full.as_numpy_iterator()]
        assert set(records) == stored and [e["record"] for e in got] == records[3:]


# ---------------------------------------------------------------- integrity
def _rewrite_record(path, chunk, change, *, fix_check):
    """Change one record's 'price' bytes; keep the TFRecord CRCs valid. With
    ``fix_check`` the record's own checksums are recomputed (a self-consistent record
    the manifest does not know)."""
    manifest = read_manifest(path)
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    ex = tf.train.Example.FromString(records[chunk])
    fmap = ex.features.feature
    price = bytearray(fmap["price"].bytes_list.value[0])
    change(price)
    fmap["price"].bytes_list.value[0] = bytes(price)
    if fix_check:
        strings = {c.name for c in manifest.columns if c.dtype == "string"}
        keys = [k for c in manifest.columns for k in c.keys]
        payload = [
            b"".join(fmap[k].bytes_list.value) if k in strings else fmap[k].bytes_list.value[0]
            for k in keys
        ]
        fmap["@check"].bytes_list.value[0] = tf.fingerprint(tf.constant(payload)).numpy().tobytes()
    records[chunk] = ex.SerializeToString()
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)


def _flip_first_byte(b):
    b[0] ^= 0x01


def _read_all(pipeline):
    for _ in pipeline.iterate(PipelineConfig(batch_size=200), diagnose=False):
        pass


@pytest.mark.parametrize("shuffle", ["buffer", "global"])
def test_corrupt_chunk_names_file_chunk_and_column(copy, shuffle):
    target = sorted(copy.glob("*.tfcol"))[1]
    _rewrite_record(target, 2, _flip_first_byte, fix_check=False)
    with pytest.raises(DataError) as e:
        _read_all(tfinput.columnar(copy, shuffle=shuffle))
    assert str(e.value) == (
        f"{target}: chunk 2: column 'price' does not match its checksum: the chunk is corrupt"
    )
    _read_all(tfinput.columnar(copy, verify=False))  # verification off: no check, no error
    problems = verify_files(copy)
    assert [(p.path, p.chunk) for p in problems] == [(str(target), 2)]
    assert "column 'price'" in problems[0].reason


@pytest.mark.parametrize("shuffle", ["buffer", "global"])
def test_file_that_does_not_match_the_manifest_names_file_and_chunk(copy, shuffle):
    target = sorted(copy.glob("*.tfcol"))[0]
    _rewrite_record(target, 1, _flip_first_byte, fix_check=True)  # same size, valid record
    with pytest.raises(DataError, match=r"chunk 1: its checksums do not match the manifest"):
        _read_all(tfinput.columnar(copy, shuffle=shuffle))
    assert [(p.path, p.chunk) for p in verify_files(copy)] == [(str(target), 1)]


def test_byte_corrupted_on_disk_is_reported_with_its_chunk(copy, small_schema):
    # The first file's first chunk (after its 12-byte record header); read with two of
    # the stored features: the check that names the file reads the damaged file again
    # once per feature, each a build of its own.
    target = sorted(copy.glob("*.tfcol"))[0]
    data = bytearray(target.read_bytes())
    data[12 + int.from_bytes(data[:8], "little") // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    schema = small_schema.replace(features=small_schema.features[:2], tables=())
    with pytest.raises(DataError) as e:  # iterate() diagnoses with check(): file, chunk
        for _ in tfinput.columnar(copy, schema).iterate(PipelineConfig(batch_size=100)):
            pass
    assert str(e.value).startswith(f"{target}: chunk 0 (rows 0-99 of the file")
    assert "corrupted record" in str(e.value)


def test_truncated_file_in_global_mode_names_the_file_and_chunk(copy):
    target = sorted(copy.glob("*.tfcol"))[2]
    data = target.read_bytes()
    target.write_bytes(data[: len(data) - 100])  # the last chunk loses its tail
    config = PipelineConfig(batch_size=200, shuffle_seed=1)
    with pytest.raises(DataError) as e:  # found at build from the manifest's sizes
        for _ in tfinput.columnar(copy, shuffle="global").iterate(config, diagnose=False):
            pass
    message = str(e.value)
    assert message.startswith(f"{target}: truncated: ")
    assert "chunk 2 (rows 200-299" in message and "missing or incomplete" in message


@pytest.mark.parametrize("batch", [48, 100], ids=["under-a-chunk", "one-to-two-chunks"])
def test_batches_cut_from_chunks_hold_every_list_as_written(tmp_path, batch):
    """Batches that are not whole chunks are cut from decoded chunks with the columns
    packed (`rebatch_codec`: lists of several columns joined row by row, then split
    again): each batch holds the same values as TFRecord's of the same rows, lists
    (empty ones too), their weights and a partial last chunk included."""
    schema = testing.criteo_like_schema(
        n_dense=2, n_categorical=2, n_multi_hot=3, max_len=4, weights=True, row_id=True
    )
    cols = testing.generate(schema, 300, seed=3)
    tfr = testing.write_tfrecord(tmp_path / "t", schema, rows=300, columns=cols)
    col = testing.write_columnar(tmp_path / "c", schema, rows=300, columns=cols, chunk_rows=64)
    config = PipelineConfig(batch_size=batch)  # 300 rows: 4 chunks of 64 and one of 44
    got = list(tfinput.columnar(col, schema).with_multi_hot_format("ragged").build(config))
    want = list(tfinput.tfrecord(tfr, schema).with_multi_hot_format("ragged").build(config))
    assert len(got) == len(want) == 300 // batch
    empty = 0
    for (features, labels), (expected, expected_labels) in zip(got, want):
        np.testing.assert_array_equal(labels, expected_labels)
        for group, values in expected.items():
            for name, value in values.items():
                a, b = features[group][name], value
                if isinstance(b, tf.RaggedTensor):
                    empty += int(tf.reduce_sum(tf.cast(b.row_lengths() == 0, tf.int32)))
                    np.testing.assert_array_equal(a.row_lengths(), b.row_lengths(), name)
                    a, b = a.flat_values, b.flat_values
                np.testing.assert_array_equal(a, b, err_msg=f"{group}/{name}")
    assert empty > 0  # empty lists were cut and joined too
