"""Arguments shared by the ``tfinput`` commands, and the one function from arguments to
a pipeline.

The argument groups: the data a command reads (`add_source_arguments`), the training
step it measures against (`add_step_arguments`) and its output (`add_output_arguments`;
`check_output`, which every command with an output path calls before any work).
Each group adds the arguments named in its ``help`` mapping, in that order, with that
help text: the flags, types, choices and defaults are shared, the sentences are each
command's own. `pipeline_from_args` turns the source arguments into a `tfinput.Pipeline`;
`count`, `delimiter` and `list_columns` parse the values a few commands take.

The built-in default data set (`DEMO`, `demo_pipeline`): what ``tfinput demo`` (and
``tune --demo``) tunes and ``tfinput profile --demo`` profiles, with no user data needed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput._src.core.config import Buildable
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.files import check_writable
from tfinput._src.core.formats.parquet import is_parquet_name
from tfinput._src.core.options import load_object

if TYPE_CHECKING:
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig
    from tfinput._src.core.pipeline import Pipeline

    #: What an argument group is added to.
    _Parser = argparse.ArgumentParser | argparse._ArgumentGroup

# dest -> (flags, add_argument keywords)
_Spec = dict[str, tuple[tuple[str, ...], dict[str, Any]]]

#: The help of ``--schema``, ``--format`` and ``--compression`` of the commands that read
#: any data set as it is (``tfinput check``, ``tfinput schema sparsecore``).
DATA_SET_HELP = {
    "schema": "schema JSON (default: schema.json next to the data; a columnar data set "
    "carries its own)",
    "format": "input format (default: columnar if there is a manifest.json, else by extension)",
    "compression": "TFRecord compression: none, GZIP, ZLIB or auto (by extension)",
}

_SOURCE: _Spec = {
    "paths": (("paths",), {"nargs": "+"}),
    "schema": (("--schema",), {}),
    "format": (("--format",), {"choices": ["tfrecord", "parquet", "columnar"], "default": None}),
    "compression": (("--compression",), {"default": "auto"}),
    "pipeline": (("--pipeline",), {"metavar": "MODULE:FUNCTION"}),
    "demo": (("--demo",), {"action": "store_true"}),
    "service": (("--service",), {"metavar": "ADDRESS|local:N"}),
    "service_workers": (("--service-workers",), {"type": int, "metavar": "N"}),
}


def _step_spec() -> _Spec:
    from tfinput._src.measurement.steps.base import CLI_STEPS

    return {
        "step": (("--step",), {"choices": CLI_STEPS, "default": "input_only"}),
        "model": (("--model",), {"metavar": "MODULE:FUNCTION"}),
        "step_fn": (("--step-fn",), {"metavar": "MODULE:FUNCTION"}),
        "device_time_ms": (("--device-time-ms",), {"type": float}),
    }


def _add(
    parser: _Parser,
    spec: _Spec,
    help: Mapping[str, str | None],
    overrides: Mapping[str, Mapping[str, object]],
) -> None:
    unknown = set(overrides) - set(help)
    if unknown or not set(help) <= set(spec):
        raise TypeError(f"unknown arguments: {sorted(unknown | (set(help) - set(spec)))}")
    for dest, text in help.items():
        flags, keywords = spec[dest]
        parser.add_argument(*flags, **{**keywords, **overrides.get(dest, {})}, help=text)


def add_source_arguments(
    parser: _Parser, help: Mapping[str, str | None], **overrides: Mapping[str, object]
) -> None:
    """Add the arguments that say which data a command reads.

    Args:
      parser: An `argparse.ArgumentParser` or argument group.
      help: The arguments to add, in order, each with its help text: ``paths``
        (``PATHS...``: files, globs or directories), ``schema`` (``--schema``),
        ``format`` (``--format tfrecord|parquet|columnar``), ``compression``
        (``--compression``, default ``auto``), ``pipeline`` (``--pipeline
        MODULE:FUNCTION``), ``demo`` (``--demo``), ``service`` (``--service
        grpc://HOST:PORT`` or ``local:N``: read through tf.data service, see
        `service_from_args`), ``service_workers`` (``--service-workers N``: the
        address's worker count).
      **overrides: ``add_argument`` keywords per argument, e.g. ``paths={"nargs": "*"}``.
    """
    _add(parser, _SOURCE, help, overrides)


def add_step_arguments(
    parser: _Parser, help: Mapping[str, str | None], **overrides: Mapping[str, object]
) -> None:
    """Add the arguments that choose the training step (`tfinput.steps.make`).

    Args:
      parser: An `argparse.ArgumentParser` or argument group.
      help: The arguments to add, in order, each with its help text: ``step``
        (``--step``, one of `tfinput.steps.CLI_STEPS`, default ``input_only``),
        ``model`` (``--model MODULE:FUNCTION``), ``step_fn`` (``--step-fn
        MODULE:FUNCTION``), ``device_time_ms`` (``--device-time-ms``, a float).
      **overrides: ``add_argument`` keywords per argument, e.g.
        ``step={"default": "ranking"}``.
    """
    _add(parser, _step_spec(), help, overrides)


def add_output_arguments(
    parser: _Parser, *, json_help: str | None = None, html: bool = False
) -> None:
    """Add ``--json`` (machine-readable output on stdout) and, with ``html``, ``--html PATH``."""
    parser.add_argument("--json", action="store_true", help=json_help)
    if html:
        parser.add_argument("--html", metavar="PATH", help="also write an HTML report with charts")


def check_output(path: str | None, flag: str, *, directory: bool) -> None:
    """Check, before any work, that an output argument can be written (None: not given).
    Folders missing on the way are fine: the command creates them (a file output's
    with `tfinput._src.core.files.create_parents`, just before it writes).

    Args:
      path: The argument's value.
      flag: The argument as the user typed it (``--out``, ``MODEL_DIR``), for the error.
      directory: Whether it names a directory (else a file).

    Raises:
      ConfigError: one line naming the path and why it cannot be written (a folder on
        the way is a file, read-only, permission denied, the wrong kind).
    """
    if path:
        check_writable(path, what=flag, directory=directory)


# ------------------------------------------------------------------ values
_SUFFIX = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def count(text: str) -> int:
    """An argparse type: ``400000``, ``400_000``, ``400k``, ``1M`` -> int."""
    m = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a count such as 400000, 400k or 1M: {text!r}")
    value = float(m.group(1).replace("_", "")) * _SUFFIX.get(m.group(2).lower(), 1)
    if value != int(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole non-negative count: {text!r}")
    return int(value)


def delimiter(text: str) -> str:
    """A field delimiter: a character, or its name (``tab``, ``comma``, ``pipe``...)."""
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
    return named.get(text.lower(), text)


def list_columns(specs: list[str] | None) -> dict[str, str]:
    """``--list-column NAME[=DELIM]`` values as ``{name: delimiter}`` (default ``|``).

    Raises:
      ConfigError: A value is not ``NAME`` or ``NAME=DELIMITER``.
    """
    lists: dict[str, str] = {}
    for spec in specs or []:
        name, sep, delim = spec.partition("=")
        if not name or (sep and not delim):
            raise ConfigError(f"--list-column: expected NAME or NAME=DELIMITER, got {spec!r}")
        lists[name] = delimiter(delim) if delim else "|"
    return lists


# ---------------------------------------------------------------- pipeline
def pipeline_from_args(
    args: argparse.Namespace, *, say: Callable[[str], object] | None = None
) -> Buildable:
    """The `tfinput.Pipeline` a command's source arguments name: exactly one of PATHS
    (with ``--schema``, ``--format``, ``--compression``: `pipeline_from_paths`),
    ``--pipeline MODULE:FUNCTION`` (`pipeline_from_spec`) or ``--demo`` (`tfinput._src.applications.cli.args.demo_pipeline`, which reports through ``say``).

    Raises:
      ConfigError: None or several of them, or ``--pipeline`` names no pipeline.
    """
    paths = getattr(args, "paths", None)
    spec = getattr(args, "pipeline", None)
    demo = getattr(args, "demo", False)
    if [bool(paths), bool(spec), bool(demo)].count(True) != 1:
        raise ConfigError("give exactly one pipeline: PATHS with --schema, --pipeline or --demo")
    if demo:
        return demo_pipeline(say=say)
    if spec:
        return service_from_args(args, pipeline_from_spec(spec))
    pipeline = pipeline_from_paths(
        paths,
        schema_path=getattr(args, "schema", None),
        fmt=getattr(args, "format", None),
        compression=getattr(args, "compression", "auto"),
    )
    return service_from_args(args, pipeline)


#: What ``--pipeline MODULE:FUNCTION`` may name (`pipeline_from_spec`).
PIPELINE_FORMS = (
    "a tfinput.Pipeline (or an object with build(config)), a function f(config) returning "
    "a tfinput.Pipeline or a tf.data.Dataset built with that PipelineConfig, or a function "
    "f() returning a tfinput.Pipeline"
)


def pipeline_from_spec(spec: str) -> Buildable:
    """What ``--pipeline MODULE:FUNCTION`` names, as a pipeline the commands measure.

    Accepted (`PIPELINE_FORMS`): a `tfinput.Pipeline` or any object with
    ``build(config)``, taken as it is; a function of one argument, ``f(config)`` (the
    README's ``make_pipeline(config)``), called with a default `PipelineConfig`: when it
    returns a `tfinput.Pipeline` that pipeline is used (each config builds it), when it
    returns a ``tf.data.Dataset`` the function is called again for every config measured;
    a function of no argument, ``f()``, returning a `tfinput.Pipeline`. The signature
    decides: a function whose parameters include a positional one receives the config.

    Raises:
      ConfigError: ``spec`` names none of these (a function needing more than one
        argument, or returning something else), naming ``spec`` and the accepted forms.
    """
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig

    obj = load_object(spec, "--pipeline")
    if isinstance(obj, Buildable) and not isinstance(obj, type):
        return obj
    if not callable(obj):
        raise ConfigError(f"--pipeline {spec}: expected {PIPELINE_FORMS}; got a {_kind(obj)}")
    name = spec.rpartition(":")[2]
    takes = takes_config(obj, spec)
    call = f"{name}(config)" if takes else f"{name}()"
    made = obj(PipelineConfig()) if takes else obj()
    if isinstance(made, Buildable) and not isinstance(made, type):
        return made
    if isinstance(made, tf.data.Dataset):
        if takes:
            return DatasetFactory(obj, spec)
        raise ConfigError(
            f"--pipeline {spec}: {call} returned a tf.data.Dataset, which cannot be rebuilt "
            f"with each config measured: make it take the config, {name}(config), and build "
            "the dataset with it (or return a tfinput.Pipeline)"
        )
    raise ConfigError(
        f"--pipeline {spec}: {call} returned a {_kind(made)}; expected {PIPELINE_FORMS}"
    )


class DatasetFactory:
    """A user's ``f(config)`` that returns a ``tf.data.Dataset``, measured as a builder:
    ``build(config)`` calls it with each config."""

    def __init__(self, make: Callable[[PipelineConfig], tf.data.Dataset], spec: str) -> None:
        self.make = make
        self.spec = spec

    def build(self, config: PipelineConfig) -> tf.data.Dataset:
        """``f(config)``, checked to be a ``tf.data.Dataset``.

        Raises:
          ConfigError: it returned something else.
        """
        import tensorflow as tf

        made = self.make(config)
        if not isinstance(made, tf.data.Dataset):
            name = self.spec.rpartition(":")[2]
            raise ConfigError(
                f"--pipeline {self.spec}: {name}(config) returned a {_kind(made)}; expected "
                "a tf.data.Dataset built with config"
            )
        return made


def takes_config(fn: Callable[..., Any], spec: str) -> bool:
    """Whether a user's pipeline function, ``--pipeline MODULE:FUNCTION``, is called
    with the `PipelineConfig` (``f(config)``: a positional parameter) or with nothing
    (``f()``), as its signature says: the one reading of a pipeline function's
    signature, for every command that calls one (``tune``, ``bench``, ``profile``). A
    callable without a readable signature is called with nothing.

    Args:
      fn: The function (or any callable).
      spec: ``MODULE:FUNCTION`` as given, for the error.

    Raises:
      ConfigError: ``fn`` needs more than one argument, or a keyword-only one: neither
        call can work; naming ``spec``, the signature and the accepted forms.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    required = [p for p in params if p.default is p.empty and p.kind not in variadic]
    positional = [
        p
        for p in params
        if p.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )
    ]
    if len(required) > 1 or any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in required):
        name = spec.rpartition(":")[2]
        raise ConfigError(
            f"--pipeline {spec}: {name}{_signature(fn)} needs arguments tfinput cannot give; "
            f"expected {PIPELINE_FORMS}"
        )
    return bool(positional)


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _kind(obj: Any) -> str:
    """``int``, ``str``: the type's name, for the messages."""
    return type(obj).__name__


def tfinput_pipeline_from_args(args: argparse.Namespace, *, command: str) -> Pipeline:
    """`pipeline_from_args` for a command that uses a `tfinput.Pipeline`'s own methods
    (``check``, ``sparsecore``).

    Raises:
      ConfigError: As `pipeline_from_args`, and ``--pipeline`` names a user's builder
        that is not a `tfinput.Pipeline`.
    """
    from tfinput._src.core.pipeline import Pipeline

    pipeline = pipeline_from_args(args)
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(
            f"tfinput {command} --pipeline {args.pipeline}: expected a tfinput.Pipeline (it "
            f"reads the files and schema one declares), got a {type(pipeline).__name__}; "
            "wrap your dataset with tfinput.wrap(dataset, schema)"
        )
    return pipeline


#: What a command that starts a fleet of servers on this host (``--service local:N``)
#: says once, at start: TensorFlow binds them to every interface, with no option to
#: bind loopback only.
LOCAL_FLEET_OPEN = (
    "--service {spec}: the tf.data service dispatcher and workers this starts on this "
    "host listen on every interface, not loopback only (TensorFlow has no option to bind "
    "one), with no authentication or encryption: while they run, anyone who can reach "
    "this host's ports can read the data or register a worker "
    '(docs/scaling.md, "Security")'
)


def service_from_args(args: argparse.Namespace, pipeline: Buildable) -> Buildable:
    """``pipeline`` read through tf.data service when ``--service`` says so:
    ``local:N`` starts a `tfinput.service.LocalFleet` of up to N worker processes on this
    machine (the tuner searches 1 to N workers), and says once on stderr that their
    ports are open to the network (`LOCAL_FLEET_OPEN`); an address (``grpc://host:port`` or
    ``host:port``) reads from a running dispatcher, whose worker count
    ``--service-workers`` gives.

    Raises:
      ConfigError: ``local:N`` with N < 1, ``--service-workers`` without ``--service``
        or with ``local:N``, ``--service`` for a user's builder that is not a
        `tfinput.Pipeline`.
    """
    spec = getattr(args, "service", None)
    workers = getattr(args, "service_workers", None)
    if not spec:
        if workers is not None:
            raise ConfigError("--service-workers needs --service ADDRESS")
        return pipeline
    from tfinput._src.core.pipeline import Pipeline

    if not isinstance(pipeline, Pipeline):
        raise ConfigError(
            f"--service {spec}: reading through tf.data service needs a tfinput.Pipeline; "
            f"the pipeline given is a {type(pipeline).__name__} (build your dataset on the "
            "service yourself, or wrap it: tfinput.wrap)"
        )
    if spec.startswith("local:"):
        from tfinput._src.core.service.servers import LocalFleet

        if workers is not None:
            raise ConfigError("--service-workers: a local:N fleet searches 1 to N workers itself")
        try:
            n = int(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--service {spec}: expected local:N, N a worker count") from None
        fleet = LocalFleet(n)
        print(LOCAL_FLEET_OPEN.format(spec=spec), file=sys.stderr, flush=True)
        return pipeline.with_service(fleet)
    address = spec if "://" in spec else f"grpc://{spec}"
    return pipeline.with_service(address, workers=workers)


def find_schema(paths: list[str]) -> str:
    """The ``schema.json`` in (or next to) the first of ``paths``.

    Raises:
      ConfigError: There is none.
    """
    first = Path(paths[0])
    candidates = [first / "schema.json"] if first.is_dir() else []
    candidates.append((first if first.is_dir() else first.parent) / "schema.json")
    for c in candidates:
        if c.is_file():
            return str(c)
    raise ConfigError(
        f"no --schema given and no schema.json next to {paths[0]!r} "
        "(`tfinput convert`, `tfinput datagen` and `tfinput schema infer -o` write one)"
    )


def pipeline_from_paths(
    paths: list[str],
    *,
    schema_path: str | None = None,
    fmt: str | None = None,
    compression: str | None = "auto",
) -> Pipeline:
    """The pipeline a command runs over data files: columnar when a ``manifest.json``
    is there (schema from the manifest unless given), else Parquet or TFRecord by
    extension unless ``fmt`` says; the schema is ``schema_path`` or a ``schema.json``
    next to the data (`find_schema`)."""
    from tfinput._src.core.columnar.format import is_columnar
    from tfinput._src.core.files import resolve_paths
    from tfinput._src.core.pipeline import columnar, parquet, tfrecord
    from tfinput._src.core.schema import Schema

    if fmt == "columnar" or (fmt is None and is_columnar(paths[0])):
        schema = Schema.from_json(schema_path) if schema_path else None
        return columnar(paths, schema)
    schema = Schema.from_json(schema_path or find_schema(paths))
    files = resolve_paths(paths)
    if fmt is None:
        fmt = "parquet" if is_parquet_name(files[0]) else "tfrecord"
    if fmt == "parquet":
        return parquet(files, schema)
    return tfrecord(files, schema, compression=compression)


#: The built-in default the README's main job runs: small enough to finish in a few
#: minutes on 2 cores, big enough that the input pipeline matters.
DEMO = {
    "rows": 200_000,
    "files": 8,
    "batch_size": 4096,
    "vocabulary_size": 10_000,
    "dim": 8,
    "n_trials": 14,
    "windows": 3,
    "window_batches": 8,
    "window_seconds": 0.5,
    "warmup_batches": 3,
    "confirm_top": 2,
    "confirm_windows": 3,
}


def demo_pipeline(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    rows: int = DEMO["rows"],
    say: Callable[[str], object] | None = None,
) -> Pipeline:
    """The demo pipeline: criteo-like TFRecord data (13 dense, 26 single ids, 4
    multi-hot lists), generated once into ``data_dir`` (default
    ``$TFINPUT_DATA_DIR`` or ``~/.cache/tfinput``) and reused."""
    from tfinput._src.applications import testing
    from tfinput._src.core.pipeline import tfrecord

    schema = testing.criteo_like_schema(vocabulary_size=DEMO["vocabulary_size"], dim=DEMO["dim"])
    root = Path(
        data_dir or os.environ.get("TFINPUT_DATA_DIR") or Path.home() / ".cache" / "tfinput"
    )
    directory = root / f"demo-criteo-like-{rows}-v1"
    done = directory / "_COMPLETE"
    if not done.exists():
        if say:
            say(f"generating {rows:,} criteo-like rows into {directory} (once)")
        testing.write_tfrecord(directory, schema, rows=rows, files=DEMO["files"], seed=0)
        schema.to_json(directory / "schema.json")
        done.write_text("ok\n")
    files = sorted(str(p) for p in directory.glob("part-*.tfrecord"))
    return tfrecord(files, schema)
