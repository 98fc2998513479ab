"""`tfinput.pipeline`: the `Pipeline` definition (builders, layout choice, validation),
the tf.data skeleton `build` applies, the factories, `check`, `iterate` and its errors."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfinput
from tests.helpers import collect
from tfinput import testing
from tfinput._src.core._pipeline_check import check_files
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError, DataError, clean_error
from tfinput.layout import is_packed
from tfinput.pipeline import CheckReport, FileCheck
from tfinput.schema import Categorical, Dense, Label, MultiHot, Schema, Table


def _graph(ds: tf.data.Dataset) -> tf.compat.v1.GraphDef:
    return tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())


# ------------------------------------------------------------ the skeleton
@pytest.mark.parametrize(
    ("read_batch", "batch_op"), [(64, "RebatchDatasetV2"), (0, "BatchDatasetV2")]
)
def test_parsing_is_vectorized_batch_then_parse(small_tfrecord, small_schema, read_batch, batch_op):
    """Batches (re-cut mini-batches by default, batches of records with read_batch=0)
    are parsed by one vectorized op."""
    config = PipelineConfig(batch_size=32, read_batch=read_batch)
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(config)
    graph = _graph(ds)
    ops = [n.op for n in graph.node]
    assert batch_op in ops and "ParallelMapDatasetV2" in ops
    fn_ops = {n.op for f in graph.library.function for n in f.node_def}
    assert "ParseExampleV2" in fn_ops and "ParseSingleExample" not in fn_ops
    # the parse map runs after the batch: batch's output feeds the map that parses
    names = {n.name: n for n in graph.node}
    parses = {f.signature.name for f in graph.library.function if _calls_parse(f, graph)}
    (map_node,) = [
        n for n in graph.node if n.op == "ParallelMapDatasetV2" and n.attr["f"].func.name in parses
    ]
    assert names[map_node.input[0].split(":")[0]].op == batch_op


def _calls_parse(function, graph) -> bool:
    """Whether ``function`` of ``graph``'s library runs ``ParseExampleV2`` (itself or in
    a function it calls)."""
    library = {f.signature.name: f for f in graph.library.function}
    seen, todo = set(), [function]
    while todo:
        f = todo.pop()
        if f.signature.name in seen:
            continue
        seen.add(f.signature.name)
        for n in f.node_def:
            if n.op == "ParseExampleV2":
                return True
            called = [a.func.name for a in n.attr.values() if a.func.name]
            todo += [library[c] for c in called + [n.op] if c in library]
    return False


def test_packing_happens_in_the_parse_map(small_tfrecord, small_schema):
    """No extra pass: the packed and per-feature graphs have the same dataset ops."""

    def ops(ds):
        return sorted(n.op for n in _graph(ds).node if n.op.endswith("Dataset"))

    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = PipelineConfig(batch_size=10)
    assert ops(pipeline.with_layout("packed").build(config)) == ops(pipeline.build(config))


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"], ids=["gzip", "zlib"])
def test_compressed_tfrecord(tmp_path, small_schema, compression):
    files = testing.write_tfrecord(
        tmp_path, small_schema, rows=200, files=2, compression=compression
    )
    for comp in ("auto", compression):
        got = collect(
            tfinput.tfrecord(files, small_schema, compression=comp).build(
                PipelineConfig(batch_size=50)
            )
        )
        assert sorted(got["dense"]["row_id"].tolist()) == list(range(200))


def test_globs_lists_and_directories(small_tfrecord, small_schema):
    d = os.path.dirname(small_tfrecord[0])
    for paths in (small_tfrecord, os.path.join(d, "part-*"), d, [small_tfrecord[0], d]):
        got = collect(tfinput.tfrecord(paths, small_schema).build(PipelineConfig(batch_size=100)))
        assert len(got["dense"]["row_id"]) == 1000


def test_same_definition_builds_with_any_config(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    configs = [
        PipelineConfig.naive(batch_size=100),
        PipelineConfig.heuristic(batch_size=100, cpu_count=2),
        PipelineConfig.autotune(batch_size=100),
        PipelineConfig(
            batch_size=100,
            interleave_cycle_length=2,
            interleave_block_length=8,
            interleave_parallelism=2,
            map_parallelism=3,
            prefetch=4,
            shuffle_buffer=256,
            shuffle_seed=1,
            private_threadpool_size=2,
            max_intra_op_parallelism=1,
            deterministic=False,
            cache=True,
            autotune_ram_budget=2**28,
        ),
    ]
    for config in configs:
        got = collect(pipeline.build(config))
        assert sorted(got["dense"]["row_id"].tolist()) == list(range(1000)), config


def test_drop_remainder_false_keeps_the_tail(small_tfrecord, small_schema):
    ds = tfinput.tfrecord(small_tfrecord, small_schema).build(
        PipelineConfig(batch_size=300, drop_remainder=False)
    )
    sizes = [int(f["dense"]["row_id"].shape[0]) for f, _ in ds]
    assert sum(sizes) == 1000 and sizes.count(300) == 3


def test_dataset_options_follow_the_config(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = PipelineConfig(
        batch_size=10,
        private_threadpool_size=2,
        max_intra_op_parallelism=1,
        deterministic=False,
        autotune_ram_budget=2**28,
    )
    options = pipeline.build(config).options()
    assert options.threading.private_threadpool_size == 2
    assert options.threading.max_intra_op_parallelism == 1
    assert options.deterministic is False
    assert options.autotune.ram_budget == 2**28
    # AUTOTUNE leaves tf.data's own defaults alone
    options = pipeline.build(PipelineConfig(batch_size=10)).options()
    assert options.threading.private_threadpool_size is None
    assert options.deterministic is None


def test_large_padded_multi_hot_batch_warns_at_build(tmp_path, caplog):
    schema = Schema(
        features=(MultiHot(name="m", table="t", max_len=65_536),),
        tables=(Table(name="t", vocabulary_size=10, dim=2),),
        labels=(Label(name="y"),),
    )
    ds = tf.data.Dataset.from_tensor_slices({"m": np.ones((4, 1), np.int64), "y": [0.0] * 4})
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        tfinput.wrap(ds, schema).build(PipelineConfig(batch_size=1024))
    assert "'m'" in caplog.text and "max_len 65536" in caplog.text and "MiB" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfinput"):
        tfinput.wrap(ds, schema).with_multi_hot_format("ragged").build(
            PipelineConfig(batch_size=1024)
        )
    assert "max_len" not in caplog.text


# ------------------------------------------------------------ the definition
def test_builders_return_new_pipelines(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    other_schema = testing.small_schema(row_id=False)
    changed = (
        pipeline.with_multi_hot_format("ragged").with_file_shuffling().with_schema(other_schema)
    )
    assert (changed.multi_hot_format, changed.shuffle_files) == ("ragged", True)
    assert changed.schema is other_schema and changed.source == pipeline.source
    assert (pipeline.multi_hot_format, pipeline.shuffle_files) == ("dense", False)
    assert pipeline.schema is small_schema
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.layout = "packed"


def test_describe_is_json_ready(small_tfrecord, small_schema):
    assert tfinput.tfrecord(small_tfrecord, small_schema).describe() == {
        "source": "tfrecord",
        "files": 4,
        "features": 8,
        "multi_hot": 2,
        "multi_hot_format": "dense",
        "layout": "per_feature",
    }


def test_with_layout_returns_a_new_pipeline_described_with_its_layout(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    packed = pipeline.with_layout("packed")
    assert pipeline.layout == "per_feature" and packed.layout == "packed"
    assert pipeline.describe()["layout"] == "per_feature"
    assert packed.describe()["layout"] == "packed"
    assert packed.packed_layout().n_ids == 12
    with pytest.raises(tfinput.ConfigError, match="layout: expected one of"):
        tfinput.Pipeline(source=pipeline.source, schema=small_schema, layout="wide")


def test_unknown_layout_name_is_refused(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    with pytest.raises(ConfigError, match=r"layout: expected one of \['per_feature', 'packed'\]"):
        pipeline.with_layout("columns")
    with pytest.raises(ConfigError, match=r"PipelineConfig\.layout"):
        PipelineConfig(layout="columns")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"multi_hot_format": "wide"},
            r"multi_hot_format: expected one of \['dense', 'sparse', 'ragged'\], got 'wide'",
        ),
        ({"schema": {"features": []}}, "schema: expected a tfinput.Schema, got dict"),
    ],
    ids=["multi-hot-format", "schema"],
)
def test_bad_definitions_are_refused(small_tfrecord, small_schema, change, message):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(pipeline, **change)


def test_build_refuses_a_config_that_is_not_a_pipeline_config(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    with pytest.raises(ConfigError, match="config: expected a PipelineConfig, got dict"):
        pipeline.build({"batch_size": 10})


def test_config_layout_overrides_the_pipelines(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    assert pipeline.layout == "per_feature"
    spec, _ = pipeline.build(PipelineConfig(batch_size=10, layout="packed")).element_spec
    assert is_packed(spec) and spec["ids"].shape == (10, 12)
    packed = pipeline.with_layout("packed")
    spec, _ = packed.build(PipelineConfig(batch_size=10)).element_spec
    assert is_packed(spec)
    spec, _ = packed.build(PipelineConfig(batch_size=10, layout="per_feature")).element_spec
    assert not is_packed(spec) and spec["ids"]["history"].shape == (10, 5)


@pytest.mark.parametrize("fmt", ["sparse", "ragged"])
def test_packed_needs_the_dense_multi_hot_format(small_tfrecord, small_schema, fmt):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema).with_multi_hot_format(fmt)
    match = f'layout "packed" needs multi_hot_format "dense", got multi_hot_format \'{fmt}\''
    with pytest.raises(ConfigError, match=match):
        pipeline.with_layout("packed").build(PipelineConfig(batch_size=10))
    with pytest.raises(ConfigError, match=match):
        pipeline.build(PipelineConfig(batch_size=10, layout="packed"))
    pipeline.with_layout("packed").build(PipelineConfig(batch_size=10, layout="per_feature"))


# ------------------------------------------------------- check and iterate
def test_describe_and_check_on_a_packed_pipeline(small_tfrecord, small_schema):
    files = small_tfrecord[:2]  # two of the four: the check reads each file
    pipeline = tfinput.tfrecord(files, small_schema).with_layout("packed")
    assert pipeline.describe()["layout"] == "packed"
    report = pipeline.check(batch_size=128)
    assert report.ok and report.records == 500
    assert report == CheckReport(files=tuple(FileCheck(path=p, records=250) for p in files))
    assert report.problems == ()


#: A schema with a dense feature, an id that must fit its table and one folded into it.
MANY_SCHEMA = Schema(
    features=(
        Dense(name="x"),
        Categorical(name="c", table="t"),
        Categorical(name="d", table="t", out_of_range="modulo"),
    ),
    tables=(Table(name="t", vocabulary_size=100, dim=4),),
    labels=(Label(name="label"),),
)


def _example(x=1.0, c=1, d=2, x_kind="float") -> bytes:
    x_feature = (
        tf.train.Feature(float_list=tf.train.FloatList(value=[x]))
        if x_kind == "float"
        else tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x)]))
    )
    feature = {
        "x": x_feature,
        "c": tf.train.Feature(int64_list=tf.train.Int64List(value=[c])),
        "d": tf.train.Feature(int64_list=tf.train.Int64List(value=[d])),
        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write(path, records) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


@pytest.fixture(scope="module")
def many_small_files(tmp_path_factory):
    """240 TFRecord files, most of one record, some large, and problems of each kind
    among them: ``(files, {name: path} of the special ones)``."""
    folder = tmp_path_factory.mktemp("many-small")
    special = {
        "big": [_example(d=i % 50) for i in range(300)],
        "nan": [_example(x=float("nan"))],
        "late-bad-id": [_example() for _ in range(250)] + [_example(c=500)] + [_example()] * 49,
        "folded": [_example(d=1000), _example(d=-3), _example()],
        "int-kind": [_example(x=3, x_kind="int")],
    }
    at = {30: "big", 31: "nan", 77: "late-bad-id", 120: "folded", 150: "int-kind"}
    files, paths = [], {}
    for i in range(240):
        name = at.get(i)
        path = _write(folder / f"part-{i:05d}.tfrecord", special[name] if name else [_example()])
        files.append(path)
        if name:
            paths[name] = path
    corrupt = bytearray(Path(files[10]).read_bytes())  # a damaged data checksum
    corrupt[-1] ^= 0xFF
    Path(files[10]).write_bytes(bytes(corrupt))
    paths["corrupt"] = files[10]
    return files, paths


def test_check_reads_many_small_files_together_and_reports_each_as_alone(many_small_files):
    """One pipeline reads the files that count cleanly; each problem (a NaN in a file
    of one record in the middle of a batch, a bad id deep in a large file, a damaged
    file, a key of the wrong kind) is reported on its file exactly as a check of that
    file alone reports it, and each file's records and folded ids are its own."""
    files, special = many_small_files
    pipeline = tfinput.tfrecord(files, MANY_SCHEMA)
    seen = []
    report = pipeline.check(batch_size=64, progress=lambda done, total: seen.append((done, total)))
    assert [f.path for f in report.files] == files
    bad = ("nan", "late-bad-id", "corrupt", "int-kind")
    assert [f.path for f in report.problems] == sorted(special[k] for k in bad)
    (alone,) = tfinput.tfrecord([special["nan"]], MANY_SCHEMA).check(batch_size=64).files
    assert report.files[files.index(special["nan"])] == alone  # found in a batch of many
    late, corrupt, kind = (
        report.files[files.index(special[k])] for k in ("late-bad-id", "corrupt", "int-kind")
    )
    assert kind == FileCheck(
        path=special["int-kind"],
        records=1,
        error="feature 'x': the schema expects float_list (dtype float32) but the file holds "
        "int64_list; set dtype='int64' or fix the data",
    )
    assert late.records == 300
    assert late.error.startswith("records 192-255: feature 'c': id out of range")
    assert corrupt.error == (
        "not a readable TFRecord file (corrupted record at byte 12: its length or checksum "
        "does not match: the bytes are damaged)"
    )
    folded = {"d": {"ids": 2, "negative": 1, "largest": 1000, "vocabulary_size": 100}}
    assert report.files[files.index(special["folded"])] == FileCheck(
        path=special["folded"], records=3, folded=folded
    )
    assert report.files[files.index(special["big"])] == FileCheck(path=special["big"], records=300)
    others = [f for f in report.files if f.path not in special.values()]
    assert len(others) == 234 and others == [FileCheck(path=f.path, records=1) for f in others]
    assert seen[0] == (0, 240) and seen[-1] == (240, 240)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_the_first_problem_among_many_files_stops_the_check_there(many_small_files):
    """What `Pipeline.iterate` reads to name the file of an error: the files up to the
    first with a problem, in order."""
    files, special = many_small_files
    report = check_files(tfinput.tfrecord(files, MANY_SCHEMA), batch_size=64, first_problem=True)
    assert [f.path for f in report.files] == files[:11]
    assert [f.path for f in report.problems] == [special["corrupt"]]


@pytest.mark.parametrize("kind", ["parquet", "columnar"])
def test_check_counts_each_of_many_files_read_together(tmp_path, kind):
    """Parquet and columnar files of a few rows each, read together in batches that
    span them: each file's rows, as its footer or manifest says."""
    schema = testing.small_schema(row_id=False)
    if kind == "parquet":
        files = testing.write_parquet(tmp_path, schema, rows=1000, files=180, seed=0)
        pipeline = tfinput.parquet(files, schema)
    else:
        files = testing.write_columnar(tmp_path, schema, rows=1000, files=180, chunk_rows=4)
        pipeline = tfinput.columnar(files, schema)
    report = pipeline.check(batch_size=64)
    assert report.ok and [f.path for f in report.files] == files
    want = [pipeline.source.count_records(f) for f in files]
    assert [f.records for f in report.files] == want and report.records == 1000


def test_iterate_yields_what_build_yields(small_tfrecord, small_schema):
    pipeline = tfinput.tfrecord(small_tfrecord, small_schema)
    config = PipelineConfig(batch_size=100, deterministic=True)
    got = [f["dense"]["row_id"].numpy() for f, _ in pipeline.iterate(config)]
    want = [f["dense"]["row_id"].numpy() for f, _ in pipeline.build(config)]
    assert len(got) == 10
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(want))


def test_iterate_turns_a_tensorflow_error_into_a_data_error_naming_the_file(
    small_tfrecord, small_schema
):
    """The data hold user ids up to 499; a table of 100 rows is too small for them.
    `Pipeline.check` (1024 records a batch) finds the file and the records. (Two
    features: the check reads the file again once per feature, to name each that fails.)"""
    tables = tuple(
        dataclasses.replace(t, vocabulary_size=100) for t in small_schema.tables if t.name == "user"
    )
    schema = small_schema.replace(features=small_schema.features[:4:3], tables=tables)
    assert [f.name for f in schema.features] == ["row_id", "user_id"]
    pipeline = tfinput.tfrecord(small_tfrecord[0], schema)
    config = PipelineConfig(batch_size=100)
    expected = "feature 'user_id': id out of range; expected ids in [0, 100) (table 'user')"
    with pytest.raises(DataError) as error:
        list(pipeline.iterate(config))
    assert str(error.value).startswith(f"{small_tfrecord[0]}: records 0-249: {expected}")
    assert isinstance(error.value.__cause__, tf.errors.InvalidArgumentError)
    with pytest.raises(DataError) as error:
        list(pipeline.iterate(config, diagnose=False))
    assert str(error.value).startswith(expected)
    assert clean_error(error.value) == str(error.value)  # tfinput's own errors pass through
