"""`tuners._columnar_advice`: the format advice (a tf.Example sample converted to
columnar records and measured side by side, with the ``tfinput convert`` command)."""

from __future__ import annotations

import os
import shlex

import pytest

import tfinput
from tfinput import cli
from tfinput._src.measurement.target import MeasureOptions
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError
from tuners._columnar_advice import FormatAdvice, format_advice


def test_format_advice_measures_a_columnar_sample_and_its_command_converts(
    pipeline, small_schema, tmp_path
):
    schema_path = tmp_path / "schema.json"
    small_schema.to_json(schema_path)
    out_dir = tmp_path / "converted"
    advice = format_advice(
        pipeline,
        PipelineConfig(batch_size=50),
        schema_path=str(schema_path),
        out_dir=str(out_dir),
        require_parse_bound=False,
        measurement=MeasureOptions(windows=2, window_batches=3, warmup_batches=1, cpu_count=2),
    )
    assert len(advice.sample_files) == 2 and advice.rows == 500
    assert advice.tf_example_examples_per_s > 0 and advice.columnar_examples_per_s > 0
    assert 0 < advice.ratio_min <= advice.ratio <= advice.ratio_max  # per-round ratios
    assert set(advice.signal["cost_us_per_example"]) == {"read", "parse", "transform", "total"}
    assert not any(os.path.exists(p) for p in [advice.sample_files[0] + "-columnar"])
    args = shlex.split(advice.command)
    assert args[:2] == ["tfinput", "convert"] and args[-2:] == ["--out", str(out_dir)]
    assert "--to" in args and args[args.index("--to") + 1] == "columnar"
    assert "convert with: tfinput convert" in advice.sentence()
    assert cli.main(args[1:]) == 0
    converted = tfinput.columnar(str(out_dir))
    rows = sum(int(b[1].shape[0]) for b in converted.build(PipelineConfig(batch_size=100)))
    assert rows == 1000


def test_format_advice_only_for_tf_example(small_parquet, small_schema):
    parquet = tfinput.parquet(small_parquet, small_schema)
    assert format_advice(parquet, PipelineConfig(batch_size=50)) is None


def test_format_advice_needs_a_sample(pipeline):
    with pytest.raises(ConfigError) as raised:
        format_advice(pipeline, PipelineConfig(batch_size=50), sample_files=0)
    assert str(raised.value) == "format advice: sample_files must be >= 1, got 0"


def _advice(ratio_min):
    return FormatAdvice(
        parse_bound=True,
        signal={"limited_by": "cpu"},
        sample_files=("a.tfrecord", "b.tfrecord"),
        rows=500,
        tf_example_examples_per_s=10_000.04,
        columnar_examples_per_s=25_000.06,
        ratio=2.50049,
        ratio_min=ratio_min,
        ratio_max=2.8,
        command="tfinput convert a.tfrecord --to columnar --out data-columnar",
        out_dir="data-columnar",
        chunk_rows=1024,
        seconds={"roofline": 1.234, "convert": 0.5, "measure": 2.0},
        method="interleaved",
    )


@pytest.mark.parametrize(
    "ratio_min, noise", [(2.2, False), (0.9, True)], ids=["beyond-noise", "within-noise"]
)
def test_format_advice_sentence(ratio_min, noise):
    sentence = _advice(ratio_min).sentence()
    assert sentence.startswith("parse is the bound: columnar records read 2.50x")
    assert ("(within the noise: the spread includes 1)" in sentence) is noise
    assert "on a 2-file sample (25,000 vs 10,000 examples/s input only" in sentence
    assert sentence.endswith(
        f"rounds {ratio_min:.2f}x-2.80x); convert with: "
        "tfinput convert a.tfrecord --to columnar --out data-columnar"
    )


def test_format_advice_to_dict_is_rounded_and_json_ready():
    data = _advice(2.2).to_dict()
    assert data["sample_files"] == ["a.tfrecord", "b.tfrecord"]
    assert data["tf_example_examples_per_s"] == 10000.0
    assert data["columnar_examples_per_s"] == 25000.1
    assert data["ratio"] == 2.5 and data["ratio_min"] == 2.2
    assert data["seconds"] == {"roofline": 1.23, "convert": 0.5, "measure": 2.0}
    assert data["signal"] == {"limited_by": "cpu"} and data["chunk_rows"] == 1024


def test_format_advice_command_names_the_directory_and_its_schema(
    small_tfrecord, small_schema, tmp_path
):
    import shutil

    data = tmp_path / "data"  # files plus schema.json, as `tfinput datagen` writes them
    data.mkdir()
    for path in small_tfrecord:
        shutil.copy(path, data)
    small_schema.to_json(data / "schema.json")
    out_dir = tmp_path / "converted"
    advice = format_advice(
        tfinput.tfrecord(str(data), small_schema),
        PipelineConfig(batch_size=50),
        out_dir=str(out_dir),
        require_parse_bound=False,
        measurement=MeasureOptions(windows=1, window_batches=2, warmup_batches=1, cpu_count=2),
    )
    assert advice.command == shlex.join(
        ["tfinput", "convert", str(data), "--input-format", "tfrecord", "--to", "columnar"]
        + ["--chunk-rows", shlex.split(advice.command)[-3], "--out", str(out_dir)]
    )
    assert cli.main(shlex.split(advice.command)[1:]) == 0
    assert tfinput.Schema.from_json(str(out_dir / "schema.json")) == small_schema
