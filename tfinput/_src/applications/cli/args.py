"""Arguments shared by the ``tfinput`` commands, and the one function from arguments to
a pipeline.

The argument groups: the data a command reads (`add_source_arguments`), the training
step it measures against (`add_step_arguments`) and its output (`add_output_arguments`;
`check_output`, which every command with an output path calls before any work).
Each group adds the arguments named in its ``help`` mapping, in that order, with that
help text: the flags, types, choices and defaults are shared, the sentences are each
command's own. `pipeline_from_args` turns the source arguments into a `tfinput.Pipeline`;
`count`, `delimiter` and `list_columns` parse the values a few commands take.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.objects import load_object
from tfinput._src.core.errors import ConfigError
from tfinput._src.core.formats.parquet import is_parquet_name
from tfinput._src.core.outputs import check_writable
from tfinput._src.measurement.target import Buildable

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.core.pipeline import Pipeline

__all__ = [
    "add_output_arguments",
    "add_source_arguments",
    "add_step_arguments",
    "check_output",
    "count",
    "delimiter",
    "find_schema",
    "list_columns",
    "pipeline_from_args",
    "pipeline_from_paths",
    "service_from_args",
    "tfinput_pipeline_from_args",
]

# dest -> (flags, add_argument keywords)
_Spec = dict[str, tuple[tuple[str, ...], dict[str, Any]]]

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
    from tfinput._src.measurement.steps import CLI_STEPS

    return {
        "step": (("--step",), {"choices": CLI_STEPS, "default": "input_only"}),
        "model": (("--model",), {"metavar": "MODULE:FUNCTION"}),
        "step_fn": (("--step-fn",), {"metavar": "MODULE:FUNCTION"}),
        "device_time_ms": (("--device-time-ms",), {"type": float}),
    }


def _add(parser: Any, spec: _Spec, help: Mapping[str, str | None], overrides: Any) -> None:
    unknown = set(overrides) - set(help)
    if unknown or not set(help) <= set(spec):
        raise TypeError(f"unknown arguments: {sorted(unknown | (set(help) - set(spec)))}")
    for dest, text in help.items():
        flags, keywords = spec[dest]
        parser.add_argument(*flags, **{**keywords, **overrides.get(dest, {})}, help=text)


def add_source_arguments(
    parser: Any, help: Mapping[str, str | None], **overrides: dict[str, Any]
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
    parser: Any, help: Mapping[str, str | None], **overrides: dict[str, Any]
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


def add_output_arguments(parser: Any, *, json_help: str | None = None, html: bool = False) -> None:
    """Add ``--json`` (machine-readable output on stdout) and, with ``html``, ``--html PATH``."""
    parser.add_argument("--json", action="store_true", help=json_help)
    if html:
        parser.add_argument("--html", metavar="PATH", help="also write an HTML report with charts")


def check_output(path: str | None, flag: str, *, directory: bool) -> None:
    """Check, before any work, that an output argument can be written (None: not given).

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
    args: argparse.Namespace, *, say: Callable[[str], Any] | None = None
) -> Buildable:
    """The `tfinput.Pipeline` a command's source arguments name: exactly one of PATHS
    (with ``--schema``, ``--format``, ``--compression``: `pipeline_from_paths`),
    ``--pipeline MODULE:FUNCTION`` (a pipeline, or a callable returning one) or
    ``--demo`` (`tfinput._src.applications.cli.demo.demo_pipeline`, which reports through ``say``).

    Raises:
      ConfigError: None or several of them, or ``--pipeline`` names no pipeline.
    """
    paths = getattr(args, "paths", None)
    spec = getattr(args, "pipeline", None)
    demo = getattr(args, "demo", False)
    if [bool(paths), bool(spec), bool(demo)].count(True) != 1:
        raise ConfigError("give exactly one pipeline: PATHS with --schema, --pipeline or --demo")
    if demo:
        from tfinput._src.applications.cli.demo import demo_pipeline

        return demo_pipeline(say=say)
    if spec:
        obj = load_object(spec, "--pipeline")
        pipeline = obj() if callable(obj) and not isinstance(obj, Buildable) else obj
        if not isinstance(pipeline, Buildable):
            raise ConfigError(
                f"--pipeline {spec}: expected a tfinput.Pipeline, got {type(pipeline).__name__}"
            )
        return service_from_args(args, pipeline)
    pipeline = pipeline_from_paths(
        paths,
        schema_path=getattr(args, "schema", None),
        fmt=getattr(args, "format", None),
        compression=getattr(args, "compression", "auto"),
    )
    return service_from_args(args, pipeline)


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


def service_from_args(args: argparse.Namespace, pipeline: Buildable) -> Buildable:
    """``pipeline`` read through tf.data service when ``--service`` says so:
    ``local:N`` starts a `tfinput.fleet.LocalFleet` of up to N worker processes on this
    machine (the tuner searches 1 to N workers); an address (``grpc://host:port`` or
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
        from tfinput._src.applications.fleet import LocalFleet

        if workers is not None:
            raise ConfigError("--service-workers: a local:N fleet searches 1 to N workers itself")
        try:
            n = int(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--service {spec}: expected local:N, N a worker count") from None
        return pipeline.with_service(LocalFleet(n))
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
    from tfinput._src.applications.columnar_records import columnar, is_columnar
    from tfinput._src.core.pipeline import parquet, tfrecord
    from tfinput._src.core.schema import Schema
    from tfinput._src.core.sources import resolve_paths

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
