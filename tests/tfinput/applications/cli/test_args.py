"""`tfinput._src.applications.cli.args`: the shared argument groups, the value parsers, and
`pipeline_from_args` on real TFRecord, Parquet and columnar files."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SEQUENTIAL, by_row_id, collect, expected_rows
from tfinput import PipelineConfig, testing
from tfinput._src.applications.cli.args import (
    add_output_arguments,
    add_source_arguments,
    add_step_arguments,
    check_output,
    count,
    delimiter,
    find_schema,
    list_columns,
    pipeline_from_args,
    pipeline_from_paths,
    tfinput_pipeline_from_args,
)
from tfinput._src.measurement.target import Target
from tfinput.errors import ConfigError
from tfinput.steps import CLI_STEPS

SOURCE_HELP = {
    "paths": "data files",
    "schema": "the schema JSON",
    "format": "input format",
    "compression": "TFRecord compression",
    "pipeline": "a pipeline object",
    "demo": "the demo data",
}


def _parser(**overrides):
    """A parser with every source argument (PATHS optional), as a command adds them."""
    parser = argparse.ArgumentParser(prog="tfinput x")
    add_source_arguments(parser, help=SOURCE_HELP, **{"paths": {"nargs": "*"}, **overrides})
    return parser


def _args(*argv):
    return _parser().parse_args([str(a) for a in argv])


# ------------------------------------------------------------ argument groups
def test_source_arguments_defaults_and_help(capsys):
    parser = argparse.ArgumentParser(prog="tfinput x")
    add_source_arguments(parser, help={"paths": "data files", "format": None, "schema": "JSON"})
    args = parser.parse_args(["a.tfrecord", "b.tfrecord"])
    assert vars(args) == {"paths": ["a.tfrecord", "b.tfrecord"], "format": None, "schema": None}
    text = parser.format_help()
    assert "data files" in text and re.search(r"--schema SCHEMA +JSON", text)
    assert "{tfrecord,parquet,columnar}" in text
    # the order of the help mapping is the order of the arguments
    options = [a.dest for a in parser._actions if a.dest != "help"]
    assert options == ["paths", "format", "schema"]
    with pytest.raises(SystemExit):
        parser.parse_args(["a", "--format", "csv"])
    assert "argument --format: invalid choice: 'csv'" in capsys.readouterr().err


def test_source_argument_overrides():
    args = _parser().parse_args(["--demo"])
    assert (args.paths, args.demo, args.compression, args.pipeline) == ([], True, "auto", None)
    args = _parser(compression={"default": "GZIP"}).parse_args(["f"])
    assert args.compression == "GZIP"


@pytest.mark.parametrize(
    "add, help, overrides, unknown",
    [
        (add_source_arguments, {"paths": "x", "colour": "y"}, {}, "['colour']"),
        (add_source_arguments, {"paths": "x"}, {"schema": {"default": "s.json"}}, "['schema']"),
        (add_step_arguments, {"step": "x", "paths": "y"}, {}, "['paths']"),
    ],
    ids=["unknown-argument", "override-not-added", "not-a-step-argument"],
)
def test_unknown_arguments_are_refused(add, help, overrides, unknown):
    with pytest.raises(TypeError, match=rf"^unknown arguments: {re.escape(unknown)}$"):
        add(argparse.ArgumentParser(), help=help, **overrides)


def test_step_arguments():
    parser = argparse.ArgumentParser()
    add_step_arguments(
        parser,
        help={"step": "s", "model": "m", "step_fn": "f", "device_time_ms": "d"},
        step={"default": "ranking"},
    )
    args = parser.parse_args([])
    assert vars(args) == {"step": "ranking", "model": None, "step_fn": None, "device_time_ms": None}
    args = parser.parse_args(["--step", CLI_STEPS[0], "--device-time-ms", "2.5"])
    assert args.step == CLI_STEPS[0] and args.device_time_ms == 2.5
    assert parser.parse_args(["--model", "m.py:build", "--step-fn", "s:f"]).step_fn == "s:f"
    with pytest.raises(SystemExit):
        parser.parse_args(["--step", "no-such-step"])


def test_step_argument_default_is_input_only():
    parser = argparse.ArgumentParser()
    add_step_arguments(parser, help={"step": None})
    assert parser.parse_args([]).step == "input_only"
    assert "input_only" in CLI_STEPS


@pytest.mark.parametrize("html", [False, True])
def test_output_arguments(html):
    parser = argparse.ArgumentParser()
    add_output_arguments(parser, json_help="machine-readable", html=html)
    args = parser.parse_args(["--json", *(["--html", "r.html"] if html else [])])
    assert args.json is True
    assert getattr(args, "html", None) == ("r.html" if html else None)
    assert parser.parse_args([]).json is False
    assert ("--html PATH" in parser.format_help()) is html


# --------------------------------------------------------------------- values
@pytest.mark.parametrize(
    "text, value",
    [
        ("400000", 400_000),
        ("400_000", 400_000),
        ("400k", 400_000),
        ("1M", 1_000_000),
        ("2g", 2_000_000_000),
        ("1.5k", 1_500),
        (" 7 ", 7),
        ("0", 0),
    ],
)
def test_count(text, value):
    assert count(text) == value


@pytest.mark.parametrize(
    "text, message",
    [
        ("lots", "expected a count such as 400000, 400k or 1M: 'lots'"),
        ("-5", "expected a count such as 400000, 400k or 1M: '-5'"),
        ("4t", "expected a count such as 400000, 400k or 1M: '4t'"),
        ("1.5", "expected a whole non-negative count: '1.5'"),
        ("0.0001k", "expected a whole non-negative count: '0.0001k'"),
    ],
)
def test_count_errors(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        count(text)
    assert str(error.value) == message


def test_count_as_an_argparse_type(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=count)
    assert parser.parse_args(["--rows", "10k"]).rows == 10_000
    with pytest.raises(SystemExit):
        parser.parse_args(["--rows", "ten"])
    assert "argument --rows: expected a count such as 400000" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, char",
    [("tab", "\t"), ("TAB", "\t"), ("\\t", "\t"), ("comma", ","), ("semicolon", ";"),
     ("pipe", "|"), ("space", " "), (";", ";"), ("::", "::")],
)  # fmt: skip
def test_delimiter(text, char):
    assert delimiter(text) == char


def test_list_columns():
    assert list_columns(None) == {} and list_columns([]) == {}
    assert list_columns(["genres", "tags=;", "ids=tab", "cats=comma"]) == {
        "genres": "|",
        "tags": ";",
        "ids": "\t",
        "cats": ",",
    }


@pytest.mark.parametrize("spec", ["=;", "tags=", ""])
def test_list_columns_errors(spec):
    with pytest.raises(ConfigError) as error:
        list_columns(["genres", spec])
    assert str(error.value) == f"--list-column: expected NAME or NAME=DELIMITER, got {spec!r}"


# ------------------------------------------------------------------- pipeline
CONFIG = PipelineConfig(batch_size=250, **SEQUENTIAL)


def _assert_reads_the_fixture_rows(pipeline, small_columns, small_schema):
    got = by_row_id(collect(pipeline.build(CONFIG)))
    assert got["dense"]["row_id"].astype(int).tolist() == list(range(small_columns.rows))
    for group, values in expected_rows(small_columns, small_schema).items():
        for name, want in values.items():
            np.testing.assert_allclose(got[group][name], want, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["labels"]["label"], small_columns.values["label"])


@pytest.mark.parametrize("kind", ["tfrecord", "parquet", "columnar"])
def test_pipeline_from_args_reads_every_format(
    request, kind, schema_file, small_schema, small_columns
):
    files = request.getfixturevalue(f"small_{kind}")
    schema = [] if kind == "columnar" else ["--schema", schema_file]  # the manifest's
    pipeline = pipeline_from_args(_args(*files, *schema))
    assert pipeline.source.kind == kind
    assert pipeline.source.files() == sorted(files)
    assert pipeline.schema == small_schema
    _assert_reads_the_fixture_rows(pipeline, small_columns, small_schema)


def test_columnar_directory_with_and_without_a_schema(tmp_path, small_columnar, small_schema):
    directory = str(Path(small_columnar[0]).parent)
    for argv in ([directory], [directory, "--format", "columnar"]):
        pipeline = pipeline_from_args(_args(*argv))
        assert pipeline.source.kind == "columnar" and pipeline.schema == small_schema
    data = small_schema.to_dict()
    for feature in data["features"]:
        if feature["name"] == "history":
            feature["max_len"] = 3
    (tmp_path / "short.json").write_text(json.dumps(data))
    pipeline = pipeline_from_args(_args(directory, "--schema", tmp_path / "short.json"))
    assert pipeline.schema.feature("history").max_len == 3  # the given schema, not the manifest's


def test_gzip_tfrecord_by_extension(tmp_path, small_schema, small_columns):
    files = testing.write_tfrecord(
        tmp_path,
        small_schema,
        rows=small_columns.rows,
        files=2,
        compression="GZIP",
        columns=small_columns,
    )
    small_schema.to_json(tmp_path / "schema.json")
    pipeline = pipeline_from_args(_args(*files))  # compression auto, schema.json beside
    assert pipeline.source.kind == "tfrecord" and all(f.endswith(".gz") for f in files)
    _assert_reads_the_fixture_rows(pipeline, small_columns, small_schema)


def test_schema_json_next_to_the_data(tmp_path, small_tfrecord, small_schema):
    for path in small_tfrecord:
        shutil.copy(path, tmp_path)
    small_schema.to_json(tmp_path / "schema.json")
    pipeline = pipeline_from_args(_args(tmp_path / "*.tfrecord"))
    assert pipeline.schema == small_schema and len(pipeline.source.files()) == 4
    pipeline = pipeline_from_args(_args(tmp_path))  # a directory
    assert pipeline.source.kind == "tfrecord" and len(pipeline.source.files()) == 4


def test_format_overrides_the_extension(tmp_path, small_parquet, schema_file):
    copies = []
    for i, path in enumerate(small_parquet):
        copies.append(str(shutil.copy(path, tmp_path / f"part-{i}.data")))
    pipeline = pipeline_from_args(_args(*copies, "--schema", schema_file, "--format", "parquet"))
    assert pipeline.source.kind == "parquet"
    assert pipeline.source.files() == copies
    pipeline = pipeline_from_paths(copies, schema_path=schema_file)  # by extension: TFRecord
    assert pipeline.source.kind == "tfrecord"


# a module naming pipelines as --pipeline takes them
PIPELINES = """\
import tfinput
from tfinput import testing

FILES = {files!r}


def make():
    return tfinput.tfrecord(FILES, testing.small_schema())


PIPELINE = make()
NOT_A_PIPELINE = 42


def not_a_pipeline():
    return "a string"


def make_pipeline(config):  # the README's form: the config is passed
    return tfinput.tfrecord(FILES, testing.small_schema())


def make_dataset(config):  # a dataset built with each config
    import tensorflow as tf

    return tf.data.Dataset.from_tensors({{"x": tf.zeros([config.batch_size])}})


def make_dataset_once():  # a dataset, but nothing to build it with each config
    import tensorflow as tf

    return tf.data.Dataset.range(3)


def needs_two(files, config):
    return make()


def make_keyword_only(*, files):
    return make()


def make_with_a_default(config=None):  # takes the config when given one
    return make_dataset(config)


class OwnBuilder:  # a user's own builder: measurable, but not a tfinput.Pipeline
    def build(self, config):
        import tensorflow as tf

        return tf.data.Dataset.range(3)


OWN = OwnBuilder()
"""


@pytest.fixture
def pipelines_py(tmp_path, small_tfrecord):
    path = tmp_path / "pipelines.py"
    path.write_text(PIPELINES.format(files=list(small_tfrecord)))
    return str(path)


@pytest.mark.parametrize("attribute", ["make", "PIPELINE"], ids=["function", "object"])
def test_pipeline_option(pipelines_py, small_tfrecord, small_schema, attribute):
    pipeline = pipeline_from_args(_args("--pipeline", f"{pipelines_py}:{attribute}"))
    assert pipeline.source.files() == list(small_tfrecord)
    assert pipeline.schema == small_schema


FORMS = (
    "a tfinput.Pipeline (or an object with build(config)), a function f(config) returning "
    "a tfinput.Pipeline or a tf.data.Dataset built with that PipelineConfig, or a function "
    "f() returning a tfinput.Pipeline"
)


@pytest.mark.parametrize(
    "attribute, message",
    [
        ("NOT_A_PIPELINE", f"expected {FORMS}; got a int"),
        ("not_a_pipeline", f"not_a_pipeline() returned a str; expected {FORMS}"),
        (
            "needs_two",
            f"needs_two(files, config) needs arguments tfinput cannot give; expected {FORMS}",
        ),
        (
            "make_keyword_only",
            f"make_keyword_only(*, files) needs arguments tfinput cannot give; expected {FORMS}",
        ),
        (
            "make_dataset_once",
            "make_dataset_once() returned a tf.data.Dataset, which cannot be rebuilt with each "
            "config measured: make it take the config, make_dataset_once(config), and build "
            "the dataset with it (or return a tfinput.Pipeline)",
        ),
    ],
    ids=["object", "returns-a-string", "two-arguments", "keyword-only", "dataset-once"],
)
def test_pipeline_option_names_no_pipeline(pipelines_py, attribute, message):
    spec = f"{pipelines_py}:{attribute}"
    with pytest.raises(ConfigError) as error:
        pipeline_from_args(_args("--pipeline", spec))
    assert str(error.value) == f"--pipeline {spec}: {message}"


def test_a_pipeline_factory_taking_the_config_as_the_readme_shows(
    pipelines_py, small_tfrecord, small_schema
):
    # make_pipeline(config) returning a tfinput.Pipeline: that pipeline, built per config
    pipeline = pipeline_from_args(_args("--pipeline", f"{pipelines_py}:make_pipeline"))
    assert pipeline.source.files() == list(small_tfrecord)
    assert pipeline.schema == small_schema
    # f(config) returning a tf.data.Dataset: called again with every config measured
    for attribute in ("make_dataset", "make_with_a_default"):
        builder = pipeline_from_args(_args("--pipeline", f"{pipelines_py}:{attribute}"))
        batch = next(iter(builder.build(PipelineConfig(batch_size=7))))
        assert batch["x"].shape == (7,)
        batches = Target.of(builder).batches(PipelineConfig(batch_size=3))  # repeated
        assert [b["x"].shape for b in itertools.islice(iter(batches), 5)] == [(3,)] * 5


def test_a_dataset_factory_that_stops_returning_datasets_is_named(tmp_path):
    module = tmp_path / "flaky.py"
    module.write_text(
        "import tensorflow as tf\n"
        "def make(config):\n"
        "    if config.batch_size == 1:\n"
        "        return [1, 2]\n"
        "    return tf.data.Dataset.range(3)\n"
    )
    builder = pipeline_from_args(_args("--pipeline", f"{module}:make"))
    with pytest.raises(ConfigError) as error:
        builder.build(PipelineConfig(batch_size=1))
    assert str(error.value) == (
        f"--pipeline {module}:make: make(config) returned a list; expected a "
        "tf.data.Dataset built with config"
    )


def test_a_users_builder_is_a_pipeline_where_building_is_all_a_command_needs(pipelines_py):
    spec = f"{pipelines_py}:OWN"
    builder = pipeline_from_args(_args("--pipeline", spec))
    assert type(builder).__name__ == "OwnBuilder"  # bench and tune measure it as it is
    with pytest.raises(ConfigError) as error:  # check reads the files a Pipeline declares
        tfinput_pipeline_from_args(_args("--pipeline", spec), command="check")
    assert str(error.value) == (
        f"tfinput check --pipeline {spec}: expected a tfinput.Pipeline (it reads the files "
        "and schema one declares), got a OwnBuilder; wrap your dataset with "
        "tfinput.wrap(dataset, schema)"
    )
    args = _args("--pipeline", spec)
    args.service, args.service_workers = "localhost:5050", None  # a command's --service
    with pytest.raises(ConfigError) as error:  # the service reads a Pipeline's build
        pipeline_from_args(args)
    assert str(error.value).startswith(
        "--service localhost:5050: reading through tf.data service needs a tfinput.Pipeline; "
        "the pipeline given is a OwnBuilder"
    )


def test_a_tfinput_pipeline_passes_where_one_is_needed(pipelines_py, small_tfrecord):
    args = _args("--pipeline", f"{pipelines_py}:make")
    pipeline = tfinput_pipeline_from_args(args, command="check")
    assert pipeline.source.files() == list(small_tfrecord)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["a.tfrecord", "--demo"],
        ["a.tfrecord", "--pipeline", "m:f"],
        ["--demo", "--pipeline", "m:f"],
    ],
    ids=["none", "paths-and-demo", "paths-and-pipeline", "demo-and-pipeline"],
)
def test_exactly_one_pipeline(argv):
    with pytest.raises(ConfigError) as error:
        pipeline_from_args(_args(*argv))
    assert str(error.value) == (
        "give exactly one pipeline: PATHS with --schema, --pipeline or --demo"
    )


def test_a_command_without_source_arguments_has_no_pipeline():
    with pytest.raises(ConfigError, match="give exactly one pipeline"):
        pipeline_from_args(argparse.Namespace())


# ----------------------------------------------------------------- find_schema
def test_find_schema(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.tfrecord").write_bytes(b"")
    (data / "schema.json").write_text("{}")
    want = str(data / "schema.json")
    assert find_schema([str(data)]) == want  # in the directory
    assert find_schema([str(data / "part-0.tfrecord"), "other"]) == want  # next to the file
    assert find_schema([str(data / "*.tfrecord")]) == want  # next to a glob


def test_find_schema_says_where_it_looked(tmp_path):
    path = str(tmp_path / "part-0.parquet")
    with pytest.raises(ConfigError) as error:
        find_schema([path])
    assert str(error.value) == (
        f"no --schema given and no schema.json next to {path!r} "
        "(`tfinput convert`, `tfinput datagen` and `tfinput schema infer -o` write one)"
    )


# ----------------------------------------------------------- output paths
#: Every command with an output path, with that path under a regular file (unwritable,
#: for root too) and an input that does not exist: the error names the output, so the
#: output was checked before the input was touched.
UNWRITABLE = {
    "convert": ["convert", "missing.csv", "--out", "{dir}"],
    "datagen": ["datagen", "{dir}", "--rows", "10"],
    "schema-infer": ["schema", "infer", "missing.csv", "-o", "{file}"],
    "schema-sparsecore": [
        "schema",
        "sparsecore",
        "missing.tfrecord",
        "--per-replica-batch-size",
        "8",
        "--out",
        "{file}",
    ],
    "export": ["export", "{dir}", "--model", "{model}", "--schema", "missing.json"],
    "bench": ["bench", "missing.tfrecord", "--out", "{file}"],
    "tune": ["tune", "missing.tfrecord", "--out", "{dir}"],
    "demo": ["demo", "--out", "{dir}"],
    "profile-logdir": ["profile", "--pipeline", "missing:f", "--logdir", "{dir}"],
    "profile-html": ["profile", "--pipeline", "missing:f", "--html", "{file}"],
    "inspect-html": ["inspect", "missing-logdir", "--html", "{file}"],
}


@pytest.mark.parametrize("argv", UNWRITABLE.values(), ids=UNWRITABLE.keys())
def test_every_output_path_is_checked_before_any_work(tmp_path, capsys, argv):
    from tfinput._src.applications.cli.registry import main

    blocker = tmp_path / "afile"
    blocker.write_text("a regular file")
    paths = {"dir": blocker / "out", "file": blocker / "out.json", "model": blocker}
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("tfinput")
    assert re.search(r"error: .*\S*afile/out(\.json)?: cannot be created: \S*afile is a file", err)
    assert blocker.read_text() == "a regular file"


def test_check_output_names_a_folder_that_takes_no_file():
    with pytest.raises(ConfigError, match=r"^--out /proc/x\.json: cannot write in /proc: "):
        check_output("/proc/x.json", "--out", directory=False)
    check_output(None, "--out", directory=False)  # not given: nothing to check
