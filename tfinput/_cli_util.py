"""Helpers shared by every ``tfinput`` subcommand: consoles, progress bars, errors,
loading ``MODULE:FUNCTION`` objects named on the command line, and keeping
TensorFlow's own log lines out of the commands' output."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfinput.errors import ConfigError

__all__ = [
    "console",
    "progress",
    "fail",
    "load_object",
    "pipeline_from_paths",
    "quiet_tensorflow",
    "wants_verbose",
]

# Lines TensorFlow's C++ runtime writes to stderr while it loads, before its log level
# applies (TF 2.20+: absl logs INFO lines such as the oneDNN notice whatever
# TF_CPP_MIN_LOG_LEVEL says): INFO and WARNING lines in the glog/absl format, and the
# continuation of the cpu_feature_guard notice. E(rror) and F(atal) lines are kept.
_TF_NOISE = re.compile(
    r"^(?:[IW]\d{4} +\d+:\d+:\d+\.\d+ +\d+ [\w.]+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions:.*rebuild TensorFlow)"
)
_TF_WARNING_MODULES = r"(tensorflow|keras|tf_keras|absl|google\.protobuf|h5py)(\.|$)"


def wants_verbose(argv: list[str]) -> bool:
    """Whether the global ``--verbose`` comes before the subcommand in ``argv``."""
    for token in argv:
        if token == "--verbose":
            return True
        if token == "--" or not token.startswith("-"):
            return False
    return False


def quiet_tensorflow(*, verbose: bool = False) -> bool:
    """Keep TensorFlow's C++ and Python log lines out of a command's output.

    Unless ``verbose`` or the user set ``TF_CPP_MIN_LOG_LEVEL``: sets it to ``"2"``
    (warnings and info off, errors kept; ``TF_ENABLE_ONEDNN_OPTS`` is left alone), sets
    the ``tensorflow`` and ``absl`` Python loggers to ERROR, ignores Python warnings
    raised in TensorFlow, Keras and absl, and drops the INFO/WARNING lines TensorFlow
    writes while it loads (before the level applies). Must run before TensorFlow is
    imported; `tfinput.cli.main` calls it first.

    Returns:
      Whether anything was changed.
    """
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return False
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=_TF_WARNING_MODULES)
    if "tensorflow" not in sys.modules and not any(
        isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    return True


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Filters stderr (the file descriptor) while ``tensorflow`` itself is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                with _filtered_stderr():
                    real(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module

        # A loader that takes no attributes is left as it is (no filter).
        with contextlib.suppress(AttributeError):
            loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file; then replay what is not noise (all
    of it if the body raised)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    ok = False
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
            ok = True
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            keep = [
                line
                for line in text.splitlines(keepends=True)
                if not ok or not _TF_NOISE.match(line)
            ]
            if keep:
                sys.stderr.write("".join(keep))
                sys.stderr.flush()


def console(stderr: bool = False) -> Any:
    """A rich console; piped or captured output gets a wide, stable layout."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 160)


def progress() -> Any:
    """A rich progress display on stderr (silent when stderr is not a terminal)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=False,
        disable=not sys.stderr.isatty(),
    )


def fail(message: str, command: str | None = None) -> int:
    """Print a one-line error on stderr; return the usage/input error code 2."""
    where = f"tfinput {command}" if command else "tfinput"
    print(f"{where}: error: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def load_object(spec: str, what: str) -> Any:
    """The object named by ``MODULE:ATTR`` (MODULE dotted, or a path to a .py file).

    Raises:
      ConfigError: malformed spec, module not importable, attribute missing.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: expected MODULE:FUNCTION, got {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise ConfigError(f"{what}: no file {path}")
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            if mod_spec is None or mod_spec.loader is None:
                raise ConfigError(f"{what}: cannot load {path}")
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            with _cwd_on_path():
                module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{what}: cannot import {module_name!r}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def _find_schema(paths: list[str]) -> str:
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
) -> Any:
    """The pipeline a command runs over data files: columnar when a ``manifest.json``
    is there (schema from the manifest unless given), else Parquet or TFRecord by
    extension unless ``fmt`` says; the schema is ``schema_path`` or a ``schema.json``
    next to the data."""
    import tfinput
    from tfinput.columnar_records import is_columnar
    from tfinput.schema import Schema
    from tfinput.sources import resolve_paths

    if fmt == "columnar" or (fmt is None and is_columnar(paths[0])):
        schema = Schema.from_json(schema_path) if schema_path else None
        return tfinput.columnar(paths, schema)
    schema = Schema.from_json(schema_path or _find_schema(paths))
    files = resolve_paths(paths)
    if fmt is None:
        fmt = "parquet" if files[0].lower().endswith((".parquet", ".pq", ".parq")) else "tfrecord"
    if fmt == "parquet":
        return tfinput.parquet(files, schema)
    return tfinput.tfrecord(files, schema, compression=compression)
