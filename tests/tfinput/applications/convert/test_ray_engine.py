"""`tfinput._src.applications.convert.ray_engine`: ``convert --engine ray`` on a local Ray instance writes
the same rows and values as the single-process converter, for Parquet and columnar
output. The Ray tasks call the single-process converter's own writers on their pieces; the
TFRecord writer is the columnar one's framing (both write ``tf.train.Example`` records
through ``tf.io.TFRecordWriter``) and tests/tfinput/applications/convert checks it on both ends, so the
Ray case of TFRecord output would only repeat the part naming, ordering and clean-up that
the two cases here check."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SHARED_DATA, cli_main
from tfinput._src.applications.convert.options import (
    ColumnOptions,
    ConvertOptions,
    RayOptions,
    ReadOptions,
    WriteOptions,
)
from tfinput.convert import convert
from tfinput.errors import DataError

ray = pytest.importorskip(
    "ray", reason="Ray is an optional extra (pip install 'tfinput[ray]'); not installed here"
)

CRITEO = SHARED_DATA / "criteo_sample.txt"
FORMATS = ("parquet", "columnar")
#: Small pieces, so that the plain CSV (about 75 KB) makes two Ray tasks: with the
#: gzipped file's one, three tasks (each Ray task costs seconds on 2 cores).
SPLIT = 40_000
OPTIONS = {"list_columns": {"genres": "|"}, "rows_per_file": 1000, "chunk_rows": 128}
SPLIT_RAY = RayOptions(split_bytes=SPLIT)


def _grouped(*, to="parquet", schema=None, on_bad_rows="error"):
    """`OPTIONS` and these, grouped as `convert_ray` takes them (`convert`'s keywords)."""
    return ConvertOptions(
        read=ReadOptions(list_columns=OPTIONS["list_columns"], on_bad_rows=on_bad_rows),
        columns=ColumnOptions(schema=schema),
        write=WriteOptions(
            to=to, rows_per_file=OPTIONS["rows_per_file"], chunk_rows=OPTIONS["chunk_rows"]
        ),
    )


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module (start-up takes seconds)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def _csv_lines(rows: int, seed: int, bad_every: int = 0) -> list[str]:
    """Rows of ints, floats, strings and a multi-valued column, with missing values;
    every ``bad_every``-th row (if > 0) has a bad value or a missing field."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(rows):
        count = "" if i % 7 == 0 else str(int(rng.integers(0, 10_000)))
        price = "" if i % 11 == 0 else f"{rng.random() * 100:.4f}"
        city = "" if i % 13 == 0 else f'"c,{int(rng.integers(0, 80))}"'
        genres = "|".join(f"g{int(g)}" for g in rng.integers(0, 9, int(rng.integers(0, 4))))
        line = f"{i % 2},{count},{price},{city},{genres}"
        if bad_every and i % bad_every == bad_every - 1:
            line = f"{i % 2},{count},inf,{city},{genres}" if i % 2 else f"{i % 2},{count}"
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[str]:
    """Two CSV inputs: a plain one cut into several pieces, and a gzipped one (one
    piece); a header, blank lines, quoted fields."""
    root = tmp_path_factory.mktemp("ray-in")
    header = "label,count,price,city,genres"
    first = _csv_lines(2500, seed=1)
    first.insert(700, "")
    (root / "a.csv").write_text("\n".join([header, *first]) + "\n")
    with gzip.open(root / "b.csv.gz", "wt") as f:
        f.write("\n".join([header, *_csv_lines(600, seed=2)]) + "\n")
    return [str(root / "a.csv"), str(root / "b.csv.gz")]


# ---------------------------------------------------------- reading back
def _parquet_rows(paths) -> list[tuple]:
    import pyarrow.parquet as pq

    rows = []
    for p in paths:
        for row in pq.read_table(p).to_pylist():
            rows.append(tuple(sorted((k, repr(v)) for k, v in row.items())))
    return rows


def _columnar_rows(directory) -> list[tuple]:
    """Every row of a columnar data set, decoded from its records (not via a pipeline)."""
    import tensorflow as tf

    from tfinput._src.core.columnar.format import LENGTHS_SUFFIX, NUMPY_DTYPES, ROWS_KEY
    from tfinput.columnar_records import read_manifest

    m = read_manifest(directory)
    rows = []
    for record in tf.data.TFRecordDataset(m.paths):
        fmap = tf.train.Example.FromString(record.numpy()).features.feature
        n = fmap[ROWS_KEY].int64_list.value[0]
        per_column = []
        for c in m.columns:
            if c.dtype == "string":
                values = list(fmap[c.name].bytes_list.value)
            else:
                values = np.frombuffer(fmap[c.name].bytes_list.value[0], NUMPY_DTYPES[c.dtype])
                values = values.tolist()
            if c.layout == "list":
                raw = fmap[c.name + LENGTHS_SUFFIX].bytes_list.value[0]
                ends = np.cumsum(np.frombuffer(raw, "<i4")).tolist()
                cells = [tuple(values[a:b]) for a, b in zip([0, *ends[:-1]], ends)]
            elif c.width:
                cells = [tuple(values[i * c.width : (i + 1) * c.width]) for i in range(n)]
            else:
                cells = values
            assert len(cells) == n
            per_column.append(cells)
        rows.extend(zip(*per_column))
    return rows


def _rows(to: str, result) -> list[tuple]:
    if to == "parquet":
        return _parquet_rows(result.paths)
    return _columnar_rows(Path(result.manifest_path).parent)


# ------------------------------------------------------------------- tests
@pytest.mark.parametrize("to", FORMATS)
def test_ray_output_equals_the_single_process_output(local_ray, inputs, tmp_path, to):
    from tfinput._src.applications.convert.ray_engine import convert_ray
    from tfinput._src.core.columnar.writer import verify_files

    local = convert(inputs, tmp_path / "local", to=to, **OPTIONS)
    dist = convert_ray(inputs, tmp_path / "ray", options=_grouped(to=to), ray=SPLIT_RAY)
    assert len(dist.paths) > len(local.paths)  # several tasks wrote files
    assert (dist.rows, dist.blank_lines, dist.skipped) == (local.rows, 1, 0) == (3100, 1, 0)
    assert dist.schema == local.schema and dist.dropped_columns == local.dropped_columns
    assert (dist.delimiter, dist.header, dist.input_format) == (",", True, "csv")
    assert not (tmp_path / "ray" / ".ray-parts").exists()
    names = sorted(p.name for p in (tmp_path / "ray").glob("part-*"))
    n = len(dist.paths)
    assert names == [Path(p).name for p in dist.paths]
    assert names[-1] == f"part-{n - 1:05d}-of-{n:05d}{Path(dist.paths[0]).suffix}"
    local_rows, dist_rows = _rows(to, local), _rows(to, dist)
    if to == "columnar":
        # Each task's last rows (< chunk_rows) move to the end: same multiset of rows.
        assert Counter(dist_rows) == Counter(local_rows) and len(dist_rows) == 3100
        manifest = json.loads(Path(dist.manifest_path).read_text())
        assert manifest["rows"] == 3100 and manifest["chunk_rows"] == 128
        assert [f["rows"] % 128 for f in manifest["files"][:-1]] == [0] * (n - 1)
        assert verify_files(Path(dist.manifest_path).parent) == []
        assert cli_main(["check", Path(dist.manifest_path).parent]) == 0
    else:
        # Files in name order hold the rows in input order; only file boundaries differ.
        assert dist_rows == local_rows


def test_bad_rows_are_reported_as_the_single_process_path_reports_them(local_ray, inputs, tmp_path):
    from tfinput import infer_schema
    from tfinput._src.applications.convert.ray_engine import convert_ray

    schema = infer_schema(inputs[:1], list_columns=OPTIONS["list_columns"]).schema
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(["label,count,price,city,genres", *_csv_lines(1500, 3, 97)]) + "\n")
    options = dict(OPTIONS, schema=schema)
    local = convert([str(path)], tmp_path / "l", on_bad_rows="skip", **options)
    skip = _grouped(schema=schema, on_bad_rows="skip")
    dist = convert_ray([str(path)], tmp_path / "r", options=skip, ray=SPLIT_RAY)
    assert dist.skipped == local.skipped == 15 and dist.rows == local.rows
    assert [str(b) for b in dist.bad_rows] == [str(b) for b in local.bad_rows]
    assert {b.line for b in dist.bad_rows} >= {98, 1456}  # in the first and the last piece
    with pytest.raises(DataError) as first:
        convert([str(path)], tmp_path / "l2", **options)
    with pytest.raises(DataError) as dist_first:
        convert_ray([str(path)], tmp_path / "r2", options=_grouped(schema=schema), ray=SPLIT_RAY)
    assert str(dist_first.value) == str(first.value)
    assert str(first.value).startswith(f"{path}:98: expected 5 fields")
    assert not (tmp_path / "r2").exists()  # nothing left behind, staging included
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r2.")]


def test_parquet_inputs_one_task_per_file(local_ray, small_parquet, tmp_path):
    from tfinput._src.applications.convert.ray_engine import convert_ray

    local = convert(small_parquet, tmp_path / "l", to="columnar", chunk_rows=64)
    options = ConvertOptions(write=WriteOptions(to="columnar", chunk_rows=64))
    dist = convert_ray(small_parquet, tmp_path / "r", options=options)
    assert dist.rows == local.rows == 1000 and dist.input_format == "parquet"
    assert Counter(_columnar_rows(tmp_path / "r")) == Counter(_columnar_rows(tmp_path / "l"))


@pytest.mark.skipif(not CRITEO.exists(), reason=f"{CRITEO} not found")
def test_the_documented_ray_command(local_ray, tmp_path, capsys):
    """docs/scaling.md's command as written (tests/test_docs_commands.py RUN_ELSEWHERE):
    raw Criteo days (TSV, no header) through the CLI on Ray, ``--ray-address auto``
    joining the running instance, equal to the one-process output."""
    lines = CRITEO.read_text().splitlines()[1:]
    days = []
    for day in range(2):
        days.append(tmp_path / f"day-{day}.tsv")
        days[-1].write_text("".join(line.replace(",", "\t") + "\n" for line in lines[day::2]))
    argv = ["--preset", "criteo", "--to", "columnar", "--json"]
    assert cli_main(["convert", *days, "--out", tmp_path / "l", *argv]) == 0
    local = json.loads(capsys.readouterr().out)
    ray_argv = ["--engine", "ray", "--ray-address", "auto"]
    code = cli_main(["convert", *days, "--out", tmp_path / "day-col", *argv, *ray_argv])
    assert code == 0
    dist = json.loads(capsys.readouterr().out)
    assert dist["rows"] == local["rows"] == 200
    assert Counter(_columnar_rows(tmp_path / "day-col")) == Counter(_columnar_rows(tmp_path / "l"))
    assert cli_main(["check", tmp_path / "day-col"]) == 0
