"""`tfinput._src.applications.cli.args`: the built-in demo data set, generated once and reused (small row
counts here; the full demo runs in tests/test_examples.py)."""

from __future__ import annotations

import json

from tests.helpers import SEQUENTIAL
from tfinput import PipelineConfig
from tfinput._src.applications.cli.args import DEMO, demo_pipeline
from tfinput.schema import Categorical, Dense, MultiHot, Schema

ROWS = 800
CONFIG = PipelineConfig(batch_size=100, **SEQUENTIAL)


def test_demo_pipeline_is_generated_once_and_reused(tmp_path):
    said = []
    p1 = demo_pipeline(tmp_path, rows=ROWS, say=said.append)
    directory = tmp_path / f"demo-criteo-like-{ROWS}-v1"
    assert said == [f"generating {ROWS:,} criteo-like rows into {directory} (once)"]
    stamp = (directory / "_COMPLETE").stat().st_mtime_ns
    files = p1.source.files()
    assert files == sorted(str(p) for p in directory.glob("part-*.tfrecord"))
    assert len(files) == DEMO["files"] == 8

    p2 = demo_pipeline(tmp_path, rows=ROWS, say=said.append)
    assert len(said) == 1  # nothing generated the second time
    assert p2.source.files() == files
    assert (directory / "_COMPLETE").stat().st_mtime_ns == stamp
    assert p2.schema == p1.schema == Schema.from_json(directory / "schema.json")


def test_demo_schema_is_criteo_like(tmp_path):
    schema = demo_pipeline(tmp_path, rows=ROWS).schema
    kinds = [type(f) for f in schema.features]
    assert (kinds.count(Dense), kinds.count(Categorical), kinds.count(MultiHot)) == (13, 26, 4)
    assert {t.vocabulary_size for t in schema.tables} == {DEMO["vocabulary_size"]}
    assert {t.dim for t in schema.tables} == {DEMO["dim"]}
    features, labels = next(iter(demo_pipeline(tmp_path, rows=ROWS).build(CONFIG)))
    assert {name: t.shape for name, t in features["ids"].items() if t.shape.rank == 2} == {
        f.name: (100, f.max_len) for f in schema.multi_hot
    }
    assert len(features["dense"]) == 13 and labels.shape == (100,)


def test_demo_data_dir_defaults_to_tfinput_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TFINPUT_DATA_DIR", str(tmp_path / "cache"))
    pipeline = demo_pipeline(rows=ROWS)
    directory = tmp_path / "cache" / f"demo-criteo-like-{ROWS}-v1"
    assert all(f.startswith(str(directory)) for f in pipeline.source.files())
    assert json.loads((directory / "schema.json").read_text())["format"] == "tfinput.schema/1"


def test_an_unfinished_demo_directory_is_generated_again(tmp_path):
    directory = tmp_path / f"demo-criteo-like-{ROWS}-v1"
    directory.mkdir()
    (directory / "part-00000-of-00008.tfrecord").write_bytes(b"cut short")  # no _COMPLETE
    said = []
    pipeline = demo_pipeline(tmp_path, rows=ROWS, say=said.append)
    assert len(said) == 1 and (directory / "_COMPLETE").is_file()
    assert len(pipeline.source.files()) == 8
    assert (directory / "part-00000-of-00008.tfrecord").stat().st_size > len(b"cut short")
