"""The trace files of a profile run: the errors, finding them, reading them.

- The exceptions `profiles` raises on purpose (`ProfileError`, `XprofLayoutError`).
  Messages say what is missing or wrong and how to capture a usable trace
  (`HOW_TO_CAPTURE`), so that a user never has to read a traceback to know what to do
  next.
- Finding the trace files of one profile run in a log directory (`find_trace`,
  `TraceRun`).
- Reading ``.xplane.pb`` files without importing TensorFlow (`load_xspace`). The XSpace schema (``tsl/profiler/protobuf/xplane.proto``) is small and stable, so it is
declared here with protobuf's descriptor API, in a private descriptor pool: ``tfinput
inspect`` then works on a machine that has xprof but not TensorFlow, and the messages
never clash with TensorFlow's own ``xplane_pb2`` if both are loaded. The schema is
declared as proto2 so that a stray non-UTF-8 byte in an event name does not reject a
whole trace (proto3 would).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tfinput.errors import TfinputError


class ProfileError(TfinputError):
    """A profile cannot be captured, or a log directory holds no usable trace."""


class XprofLayoutError(ProfileError):
    """xprof's output no longer has the tables or columns this package was tested with.

    Raised when a newer (or older) xprof renames or drops a column that `profiles`
    reads; the message names the installed xprof version and `TESTED_XPROF`.
    """


_PACKAGE = "tfinput_profiles.xplane"


# The schema, as (message, fields); a field is (name, number, label, type, message type,
# oneof index). Nested map entries and oneofs follow.
_Field = tuple[str, int, str, str, str | None, int | None]
_MESSAGES: tuple[tuple[str, tuple[_Field, ...]], ...] = (
    (
        "XSpace",
        (
            ("planes", 1, "repeated", "message", "XPlane", None),
            ("errors", 2, "repeated", "string", None, None),
            ("warnings", 3, "repeated", "string", None, None),
            ("hostnames", 4, "repeated", "string", None, None),
        ),
    ),
    (
        "XPlane",
        (
            ("id", 1, "optional", "int64", None, None),
            ("name", 2, "optional", "string", None, None),
            ("lines", 3, "repeated", "message", "XLine", None),
            ("event_metadata", 4, "repeated", "message", "XPlane.EventMetadataEntry", None),
            ("stat_metadata", 5, "repeated", "message", "XPlane.StatMetadataEntry", None),
            ("stats", 6, "repeated", "message", "XStat", None),
        ),
    ),
    (
        "XLine",
        (
            ("id", 1, "optional", "int64", None, None),
            ("display_id", 10, "optional", "int64", None, None),
            ("name", 2, "optional", "string", None, None),
            ("display_name", 11, "optional", "string", None, None),
            ("timestamp_ns", 3, "optional", "int64", None, None),
            ("duration_ps", 9, "optional", "int64", None, None),
            ("events", 4, "repeated", "message", "XEvent", None),
        ),
    ),
    (
        "XEvent",
        (
            ("metadata_id", 1, "optional", "int64", None, None),
            ("offset_ps", 2, "optional", "int64", None, 0),
            ("num_occurrences", 5, "optional", "int64", None, 0),
            ("duration_ps", 3, "optional", "int64", None, None),
            ("stats", 4, "repeated", "message", "XStat", None),
        ),
    ),
    (
        "XStat",
        (
            ("metadata_id", 1, "optional", "int64", None, None),
            ("double_value", 2, "optional", "double", None, 0),
            ("uint64_value", 3, "optional", "uint64", None, 0),
            ("int64_value", 4, "optional", "int64", None, 0),
            ("str_value", 5, "optional", "string", None, 0),
            ("bytes_value", 6, "optional", "bytes", None, 0),
            ("ref_value", 7, "optional", "uint64", None, 0),
        ),
    ),
    (
        "XEventMetadata",
        (
            ("id", 1, "optional", "int64", None, None),
            ("name", 2, "optional", "string", None, None),
            ("display_name", 4, "optional", "string", None, None),
            ("metadata", 3, "optional", "bytes", None, None),
            ("stats", 5, "repeated", "message", "XStat", None),
            ("child_id", 6, "repeated", "int64", None, None),
        ),
    ),
    (
        "XStatMetadata",
        (
            ("id", 1, "optional", "int64", None, None),
            ("name", 2, "optional", "string", None, None),
            ("description", 3, "optional", "string", None, None),
        ),
    ),
)
#: message -> its map entries, (entry name, value message); keys are int64.
_MAP_ENTRIES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "XPlane": (
        ("EventMetadataEntry", "XEventMetadata"),
        ("StatMetadataEntry", "XStatMetadata"),
    ),
}
#: message -> the name of its oneof (index 0).
_ONEOFS: Mapping[str, str] = {"XEvent": "data", "XStat": "value"}


def _build_file_descriptor() -> Any:
    from google.protobuf import descriptor_pb2

    f = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(
        name="tfinput_profiles/xplane.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in _MESSAGES:
        msg = fd.message_type.add(name=name)
        for fname, number, label, ftype, type_name, oneof in fields:
            field = msg.field.add(
                name=fname,
                number=number,
                label=getattr(f, f"LABEL_{label.upper()}"),
                type=getattr(f, f"TYPE_{ftype.upper()}"),
            )
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if oneof is not None:
                field.oneof_index = oneof
        for entry, value_type in _MAP_ENTRIES.get(name, ()):
            nested = msg.nested_type.add(name=entry)
            nested.field.add(name="key", number=1, label=f.LABEL_OPTIONAL, type=f.TYPE_INT64)
            nested.field.add(
                name="value",
                number=2,
                label=f.LABEL_OPTIONAL,
                type=f.TYPE_MESSAGE,
                type_name=f".{_PACKAGE}.{value_type}",
            )
            nested.options.map_entry = True
        if name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[name])
    return fd


@functools.cache
def xspace_class() -> type:
    """The ``XSpace`` message class (from a private descriptor pool), e.g. to build a
    trace in a test: ``xspace_class()()``."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_build_file_descriptor())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.XSpace"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class XSpaceFile:
    """One parsed ``<host>.xplane.pb`` file.

    Attributes:
      host: Host name, taken from the file name as xprof does (``<host>.xplane.pb``).
      path: The file read.
      space: The parsed ``XSpace`` message.
    """

    host: str
    path: Path
    space: Any


def host_name_of(path: Path) -> str:
    """``/a/b/worker-0.xplane.pb`` -> ``worker-0``."""
    name = path.name
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else path.stem


def parse_xspace(data: bytes, *, source: str = "<bytes>") -> Any:
    """Parse serialized XSpace bytes, checking that they look like a profiler trace.

    Raises:
      ProfileError: The bytes are empty, truncated, or not an XSpace written by a profiler.
    """
    from google.protobuf.message import DecodeError

    how = (
        "Capture a new trace with `tfinput profile --logdir DIR ...` (or "
        "tf.profiler.experimental.start(DIR) ... stop() around marked steps)."
    )
    if not data:
        raise ProfileError(
            f"{source}: the trace file is empty (0 bytes); the profiler was probably "
            f"stopped before it finished writing. {how}"
        )
    space = xspace_class()()
    try:
        space.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ProfileError(
            f"{source}: cannot be read as a profiler trace ({len(data)} bytes): it is "
            f"truncated or not an XSpace protobuf ({e}). {how}"
        ) from e
    names = [p.name for p in space.planes]
    if not any(n.startswith(("/host:", "/device:")) for n in names):
        raise ProfileError(
            f"{source}: not a profiler trace: an XSpace has /host: or /device: planes, "
            f"this file has {names or 'no planes'}. {how}"
        )
    return space


def load_xspace(path: str | Path) -> XSpaceFile:
    """Read and validate one ``.xplane.pb`` file.

    Raises:
      ProfileError: The file cannot be read, or is not a valid trace.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ProfileError(f"cannot read trace file {path}: {e.strerror}") from e
    return XSpaceFile(
        host=host_name_of(path), path=path, space=parse_xspace(data, source=str(path))
    )


def host_planes(space: Any) -> Iterator[Any]:
    """The ``/host:...`` planes of an XSpace (where tf.data and step events are)."""
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            yield plane


def stat_value(stat: Any, stat_names: Mapping[int, str]) -> Any:
    """The Python value of an ``XStat`` (``ref_value`` resolved to its string)."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return stat_names.get(value, "")
    if kind == "bytes_value":
        return bytes(value)
    return value


#: How to get a trace, appended to messages about a missing or unreadable one.
HOW_TO_CAPTURE = (
    "Capture one with `tfinput profile --logdir DIR ...` or profiles.capture(), or with "
    "tf.profiler.experimental.start(DIR) ... stop() around marked steps."
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceRun:
    """The trace files of one profile run.

    Attributes:
      logdir: The directory given by the user.
      run: The run's name (its directory relative to ``logdir``).
      run_dir: Directory holding the ``.xplane.pb`` files.
      hosts: Host names (from the file names), sorted.
      paths: One ``.xplane.pb`` per host, in ``hosts`` order.
      other_runs: Other runs found under ``logdir`` (not analysed).
    """

    logdir: Path
    run: str
    run_dir: Path
    hosts: tuple[str, ...]
    paths: tuple[Path, ...]
    other_runs: tuple[str, ...] = ()


def _runs_under(root: Path) -> dict[Path, list[Path]]:
    """Run directory -> its trace files; a run inside another run's directory (the JAX
    trace a capture keeps in ``<run>/jax/``) belongs to that run, not a run of its own."""
    runs: dict[Path, list[Path]] = {}
    for path in sorted(root.rglob("*.xplane.pb")):
        if path.is_file():
            runs.setdefault(path.parent, []).append(path)
    return {
        run: paths for run, paths in runs.items() if not any(other in run.parents for other in runs)
    }


def find_trace(
    logdir: str | os.PathLike[str], *, run: str | None = None, host: str | None = None
) -> TraceRun:
    """Locate the trace files of one profile run.

    ``logdir`` may be a TensorBoard log directory (``logdir/plugins/profile/<run>/``,
    at any depth), a run directory, or one ``.xplane.pb`` file.

    Args:
      logdir: Where to look.
      run: Run to pick when there are several (name, relative path, or its last
        part); default: the newest.
      host: Only this host's file (default: every host of the run).

    Raises:
      ProfileError: Nothing usable found; the message says what was looked for.
    """
    root = Path(logdir)
    if not root.exists():
        raise ProfileError(f"{root} does not exist. {HOW_TO_CAPTURE}")
    if root.is_file():
        if not root.name.endswith(".xplane.pb"):
            raise ProfileError(
                f"{root} is not a profiler trace: expected a <host>.xplane.pb file or a "
                f"log directory. {HOW_TO_CAPTURE}"
            )
        runs = {root.parent: [root]}
        base = root.parent
    else:
        runs = _runs_under(root)
        base = root
    if not runs:
        others = sorted({p.suffix for p in root.rglob("*") if p.is_file()}) if root.is_dir() else []
        extra = ""
        if any(p.name.endswith(".xplane.riegeli") for p in root.rglob("*")):
            extra = " (found .xplane.riegeli files: only .xplane.pb is supported)"
        raise ProfileError(
            f"no profiler trace (*.xplane.pb) under {root}{extra}; files there have "
            f"suffixes {others or 'none'}. {HOW_TO_CAPTURE}"
        )

    def name_of(run_dir: Path) -> str:
        try:
            rel = run_dir.relative_to(base).as_posix()
        except ValueError:
            rel = run_dir.name
        return run_dir.name if rel in ("", ".") else rel

    names = {name_of(d): d for d in runs}
    if run is not None:
        matches = [n for n in names if run in (n, Path(n).name) or n.endswith("/" + run)]
        if not matches:
            raise ProfileError(f"no profile run {run!r} under {root}; runs: {sorted(names)}")
        chosen = matches[0]
    else:
        # Newest run: the one whose trace files were written last.
        chosen = max(names, key=lambda n: (max(p.stat().st_mtime for p in runs[names[n]]), n))
    run_dir = names[chosen]
    files = sorted(runs[run_dir])

    hosts = [host_name_of(p) for p in files]
    if host is not None:
        if host not in hosts:
            raise ProfileError(f"no host {host!r} in run {chosen}; hosts: {hosts}")
        files = [files[hosts.index(host)]]
        hosts = [host]
    return TraceRun(
        logdir=root,
        run=chosen,
        run_dir=run_dir,
        hosts=tuple(hosts),
        paths=tuple(files),
        other_runs=tuple(sorted(n for n in names if n != chosen)),
    )
