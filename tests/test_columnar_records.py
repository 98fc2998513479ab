"""Columnar pre-batched records: identical batches to the other sources, every example
exactly once, shuffling, integrity errors naming file and chunk, tuner and bench."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import by_row_id, collect, expected_rows
from tests.helpers import cli_main as _cli
from tfinput import testing
from tfinput.columnar_records import (
    FORMAT,
    ColumnarWriter,
    read_manifest,
    storage_columns,
    verify_files,
)
from tfinput.config import PipelineConfig
from tfinput.errors import DataError, SchemaError, SourceError

SEQUENTIAL = dict(
    interleave_cycle_length=1,
    interleave_parallelism=1,
    map_parallelism=1,
    prefetch=0,
    deterministic=True,
)


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


@pytest.fixture
def copy(tmp_path, small_columnar):
    """A private copy of the columnar data set, to damage."""
    d = tmp_path / "col"
    shutil.copytree(os.path.dirname(small_columnar[0]), d)
    return d


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


def test_schema_comes_from_the_manifest_and_shapes_are_static(small_schema, small_columnar):
    pipeline = tfinput.columnar(os.path.dirname(small_columnar[0]))
    assert pipeline.schema == small_schema and pipeline.source.kind == "columnar"
    features, labels = pipeline.build(PipelineConfig(batch_size=200)).element_spec
    assert labels.shape == (200,)
    for group in features.values():
        for spec in group.values():
            assert spec.shape.is_fully_defined() and spec.shape[0] == 200
    assert features["ids"]["history"].shape == (200, 5)


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
    merged = {
        g: {n: np.concatenate([p[g][n] for p in parts]) for n in parts[0][g]} for g in parts[0]
    }
    assert sorted(merged["dense"]["row_id"].astype(int).tolist()) == list(range(1000))
    got = by_row_id(merged)
    want = expected_rows(small_columns, small_schema)
    for group in ("dense", "ids", "weights"):
        for name, expected in want[group].items():
            np.testing.assert_allclose(got[group][name], expected, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["labels"]["label"], small_columns.values["label"])


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


def test_corrupt_chunk_names_file_chunk_and_column(copy):
    target = sorted(copy.glob("*.tfcol"))[1]
    _rewrite_record(target, 2, _flip_first_byte, fix_check=False)
    with pytest.raises(DataError) as e:
        _read_all(tfinput.columnar(copy))
    assert str(e.value) == (
        f"{target}: chunk 2: column 'price' does not match its checksum: the chunk is corrupt"
    )
    _read_all(tfinput.columnar(copy, verify=False))  # verification off: no check, no error
    problems = verify_files(copy)
    assert [(p.path, p.chunk) for p in problems] == [(str(target), 2)]
    assert "column 'price'" in problems[0].reason


def test_file_that_does_not_match_the_manifest_names_file_and_chunk(copy):
    target = sorted(copy.glob("*.tfcol"))[0]
    _rewrite_record(target, 1, _flip_first_byte, fix_check=True)  # same size, valid record
    with pytest.raises(DataError, match=r"chunk 1: its checksums do not match the manifest"):
        _read_all(tfinput.columnar(copy))
    assert [(p.path, p.chunk) for p in verify_files(copy)] == [(str(target), 1)]


def test_truncated_file_names_the_first_incomplete_chunk(copy):
    target = sorted(copy.glob("*.tfcol"))[2]
    entry = read_manifest(copy).entry(str(target))
    with open(target, "r+b") as f:
        f.truncate(entry.offsets[1] + 10)
    with pytest.raises(DataError) as e:
        tfinput.columnar(copy).build(PipelineConfig(batch_size=200))
    assert str(e.value).startswith(f"{target}: truncated: {entry.offsets[1] + 10:,} bytes")
    assert "chunk 1 (rows 100-199" in str(e.value) and "1 later chunk(s)" in str(e.value)
    assert [p.chunk for p in verify_files(copy)] == [1]


def test_byte_corrupted_on_disk_is_reported_with_its_chunk(copy):
    target = sorted(copy.glob("*.tfcol"))[3]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:  # iterate() diagnoses with check(): file, chunk
        for _ in tfinput.columnar(copy).iterate(PipelineConfig(batch_size=100)):
            pass
    assert str(e.value).startswith(f"{target}: chunk 0 (rows 0-99 of the file")
    assert "corrupted record" in str(e.value)


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        ("version", SourceError, r"format 'tfinput.columnar/2' is not supported; this "),
        (
            "missing-file",
            SourceError,
            r"part-00001-of-00004.tfcol: listed in the manifest .* missing",
        ),
        ("unlisted-file", SourceError, r"extra.tfcol: not listed in the manifest"),
        ("bigger-file", DataError, r"the file was rewritten or appended to after its manifest"),
        ("no-manifest", SourceError, r"no columnar manifest"),
    ],
    ids=["version", "missing-file", "unlisted-file", "bigger-file", "no-manifest"],
)
def test_manifest_problems(copy, damage, error, message):
    manifest = copy / "manifest.json"
    paths = [copy]
    if damage == "version":
        data = json.loads(manifest.read_text())
        data["format"] = "tfinput.columnar/2"
        manifest.write_text(json.dumps(data))
    elif damage == "missing-file":
        next(copy.glob("part-00001-*")).unlink()
    elif damage == "unlisted-file":
        shutil.copy(next(copy.glob("part-00001-*")), copy / "extra.tfcol")
        paths = [str(copy / "*.tfcol")]
    elif damage == "bigger-file":
        with open(next(copy.glob("part-00001-*")), "ab") as f:
            f.write(b"\0" * 8)
    else:
        manifest.unlink()
    with pytest.raises(error, match=message):
        tfinput.columnar(paths, testing.small_schema()).build(PipelineConfig(batch_size=200))


# ------------------------------------------------------------------- schema
def test_reading_with_another_compatible_schema(small_columnar, small_schema):
    history = small_schema.feature("history")
    narrow = small_schema.replace(
        features=tuple(
            f if f.name != "history" else type(f)(**{**f.__dict__, "max_len": 2})
            for f in small_schema.features
        )
    )
    assert history.max_len == 5
    features, _ = next(
        iter(tfinput.columnar(small_columnar, narrow).build(PipelineConfig(batch_size=100)))
    )
    assert features["ids"]["history"].shape == (100, 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "nope"}, r"feature 'nope': column 'nope' is not stored"),
        (
            {"dtype": "string"},
            r"column 'user_id' is stored as fixed int64 but the schema reads it as fixed string",
        ),
    ],
    ids=["missing-column", "other-layout"],
)
def test_incompatible_schema_is_a_schema_error(small_columnar, small_schema, change, message):
    features = tuple(
        type(f)(**{**f.__dict__, **change, **({"default": ""} if "dtype" in change else {})})
        if f.name == "user_id"
        else f
        for f in small_schema.features
    )
    schema = small_schema.replace(features=features)
    with pytest.raises(SchemaError, match=message):
        tfinput.columnar(small_columnar, schema).build(PipelineConfig(batch_size=100))


def test_writer_fills_defaults_and_rejects_missing_required_values(tmp_path):
    import pyarrow as pa

    schema = tfinput.Schema.of(
        [
            tfinput.Dense(name="x", default=2.5),
            tfinput.Categorical(name="c", table="t"),
            tfinput.MultiHot(name="m", table="t", max_len=3),
        ],
        tables=[tfinput.Table(name="t", vocabulary_size=10, dim=4)],
        labels=["label"],
    )
    table = pa.table(
        {
            "x": pa.array([None, 1.0], pa.float32()),
            "c": pa.array([1, 2], pa.int64()),
            "m": pa.array([None, [3, 4]], pa.list_(pa.int64())),
            "label": pa.array([0.0, 1.0], pa.float32()),
        }
    )
    with ColumnarWriter(tmp_path / "ok", schema, chunk_rows=4) as w:
        w.write(table)
    features, _ = next(iter(tfinput.columnar(tmp_path / "ok").build(PipelineConfig(batch_size=2))))
    assert features["dense"]["x"].numpy().tolist() == [2.5, 1.0]
    assert features["weights"]["m"].numpy().tolist() == [[0, 0, 0], [1, 1, 0]]
    bad = table.set_column(1, "c", pa.array([None, 2], pa.int64()))
    with (
        pytest.raises(DataError, match="column 'c': missing value in row 0 of a chunk"),
        ColumnarWriter(tmp_path / "bad", schema, chunk_rows=4) as w,
    ):
        w.write(bad)
    assert not list((tmp_path / "bad").glob("*.tfcol"))  # aborted: nothing left behind


def test_reserved_column_names_are_rejected():
    schema = tfinput.Schema.of([tfinput.Dense(name="@rows")], labels=["label"])
    with pytest.raises(SchemaError, match="column name '@rows' is reserved"):
        storage_columns(schema)


def test_manifest_records_layout_chunks_and_checksums(small_columnar, small_schema):
    m = read_manifest(small_columnar[0])
    assert m.to_dict()["format"] == FORMAT and m.chunk_rows == 100 and m.rows == 1000
    assert [f.rows for f in m.files] == [300, 300, 300, 100]
    assert [f.chunks for f in m.files] == [3, 3, 3, 1]
    assert all(len(d) == 16 for f in m.files for d in f.digests)
    assert all(os.path.getsize(p) == f.bytes for p, f in zip(m.paths, m.files))
    assert {c.name: c.describe() for c in m.columns}["embedding"] == "fixed float32[3]"
    assert {c.name: c.describe() for c in m.columns}["tags"] == "list string"
    assert verify_files(small_columnar) == []


# ---------------------------------------------------------- tuner and bench
def test_tuner_accepts_a_columnar_pipeline(small_columnar, tmp_path):
    from tuners.study import tune

    pipeline = tfinput.columnar(small_columnar)
    result = tune(
        pipeline,
        n_trials=3,
        base=PipelineConfig(batch_size=100),
        cpu_count=2,
        lock_path=str(tmp_path / "lock"),
        windows=2,
        window_batches=2,
        warmup_batches=1,
        confirm_top=1,
        confirm_windows=1,
    )
    assert sum(result.trials.values()) == 3 and result.best_config.batch_size == 100
    features, _ = next(iter(pipeline.build(result.best_config)))
    assert features["ids"]["history"].shape == (100, 5)


def test_bench_cli_finds_a_columnar_directory_by_its_manifest(small_columnar, capsys):
    code = _cli(
        [
            "bench",
            os.path.dirname(small_columnar[0]),
            "--config",
            "naive",
            "--batch-size",
            "200",
            "--windows",
            "1",
            "--window-batches",
            "2",
            "--warmup-batches",
            "1",
            "--roofline",
            "--roofline-windows",
            "1",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["results"][0]["name"] == "naive" and data["results"][0]["examples_per_s"]["median"] > 0
    )
    assert data["roofline"]["limited_by"] in ("cpu", "read")


def test_lazy_factory_survives_importing_the_module():
    import tfinput.columnar_records  # sets the attribute tfinput.columnar_records only

    assert "columnar" in tfinput.__all__ and callable(tfinput.columnar)
    assert tfinput.columnar.__module__ == "tfinput.columnar_records"
