"""What the step spends besides input: its top operations, and embedding-sized dense work.

**Top operations by self time per step**, on the host and on the device:

- from TensorFlow's trace, xprof's ``framework_op_stats`` table (`framework_ops`):
  every TensorFlow op (``Host`` or ``Device``) with its total self time over the
  profile, divided by the steps analysed;
- from JAX's trace (`xla_ops`), which xprof's table leaves empty on the CPU: each XLA
  execution (an event carrying an ``hlo_op`` stat: a thunk on the CPU, a kernel on a
  GPU's stream), its time inside the marked steps divided by their number.

**Embedding-sized dense work** (`dense_work`): a whole read or a whole update, inside
the step, of a variable of at least `DENSE_BYTES`. TensorFlow reads a resource variable
with ``ReadVariableOp``, which copies the whole variable once a sparse op (an
optimizer's scatter) has touched it (a read faster than such a copy, `COPY_RATE`, only
handed the buffer over and is not named), and updates it whole with
``Assign*VariableOp`` and the dense ``ResourceApply*`` ops; ``ResourceGather`` and
``ResourceScatter*`` touch rows only. The trace has each op's time but not its size: the sizes are those
`profiles._variables` recorded from the graphs when the capture ended, matched here by
op name. On a GPU, a device-to-device copy of at least `DENSE_BYTES` (its size is in
the trace) is dense work too, named after its HLO op.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from profiles._xplane import stat_value
from profiles._xprof import cell_number, find_table, table_rows

#: The smallest variable whose whole read or update is named as dense work (16 MB:
#: a table of a million rows of 4 floats).
DENSE_BYTES = 16_000_000

#: A read counts as a copy of the whole variable when it takes at least the time to
#: copy it at this rate (bytes per second; on a host, and on an accelerator): faster
#: than any memory copy, it only handed the variable's buffer over, as TensorFlow does
#: for a variable no sparse op has touched.
COPY_RATE = {"host": 200e9, "device": 10e12}

#: Op types that read a whole variable, and that write a whole one.
DENSE_READS = frozenset({"ReadVariableOp"})
_DENSE_UPDATES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
#: Operations kept in a report, largest self time first.
TOP_OPS = 10
_COPY_SIZE = re.compile(r"\bsize:(\d+)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpTime:
    """One operation's self time per step.

    Attributes:
      where: ``"host"`` or ``"device"`` (an XLA execution on JAX's CPU client runs on
        host threads: ``"host"``).
      type: TensorFlow's op type (``ReadVariableOp``), or ``"XLA"``.
      name: The op's name (TensorFlow's node name, or the HLO op with its module).
      ms_per_step: Self time per step.
      share: ``ms_per_step`` over the mean step time (0 without steps).
      calls_per_step: How many times it ran per step.
      source: ``"framework_op_stats"`` (xprof, TensorFlow's trace) or ``"jax trace"``.
    """

    where: str
    type: str
    name: str
    ms_per_step: float
    share: float
    calls_per_step: float
    source: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class DenseWork:
    """A whole read or update of an embedding-sized variable inside the step.

    Attributes:
      variable: The variable's name (``tables/emb_0``); for a device copy, its HLO op.
      shape: The variable's shape.
      dtype: Its dtype (``float32``).
      bytes: Its size.
      access: ``"read"`` (the whole variable read), ``"update"`` (written whole) or
        ``"copy"`` (a device-to-device copy of that size).
      ops: The ops doing it, as the trace names them.
      ms_per_step: Their self time per step.
      share: ``ms_per_step`` over the mean step time.
    """

    variable: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    access: str
    ops: tuple[str, ...]
    ms_per_step: float
    share: float

    @property
    def summary(self) -> str:
        """One line: ``tables/emb_0 (1,000,000 x 16 float32, 64.0 MB) read whole:
        6.20 ms per step (2.1% of the step), by ...``."""
        shape = " x ".join(f"{d:,}" for d in self.shape)
        what = {"read": "read whole", "update": "updated whole", "copy": "copied whole"}
        size = f"{shape} {self.dtype}, " if shape else ""
        return (
            f"{self.variable} ({size}{self.bytes / 1e6:.1f} MB) {what[self.access]}: "
            f"{self.ms_per_step:.2f} ms per step ({self.share:.1%} of the step), by "
            f"{', '.join(self.ops)}"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (with ``summary``)."""
        return {
            **dataclasses.asdict(self),
            "shape": list(self.shape),
            "ops": list(self.ops),
            "summary": self.summary,
        }


# ------------------------------------------------------------- TensorFlow's ops
@dataclasses.dataclass(frozen=True)
class _FrameworkOp:
    where: str
    type: str
    name: str
    self_ms: float
    calls: int


def framework_op_rows(tables: Any, *, input_ops: Iterable[Any] = ()) -> list[_FrameworkOp]:
    """Every op of xprof's ``framework_op_stats``, whole-profile totals, but idle time
    and the input pipeline's own events: tf.data's iterators (type ``Dataset``) and the
    annotated input stages (``input_ops``: xprof's input-op table)."""
    stages = {op.name for op in input_ops}
    rows = table_rows(find_table(tables, "framework_op_stats", "ops"))
    return [
        _FrameworkOp(
            where=str(r["host_or_device"]).lower(),
            type=str(r["type"]),
            name=str(r["operation"]),
            self_ms=cell_number(r["total_self_time"]) / 1e3,
            calls=int(cell_number(r["occurrences"])),
        )
        for r in rows
        if str(r["type"]) not in ("IDLE", "Dataset") and str(r["operation"]) not in stages
    ]


def framework_ops(
    rows: Sequence[_FrameworkOp], *, steps: int, step_ms: float | None, top: int = TOP_OPS
) -> tuple[OpTime, ...]:
    """The ``top`` ops by self time, per step."""
    if steps <= 0:
        return ()
    ranked = sorted(rows, key=lambda r: -r.self_ms)[:top]
    return tuple(
        OpTime(
            where=r.where,
            type=r.type,
            name=r.name,
            ms_per_step=r.self_ms / steps,
            share=r.self_ms / steps / step_ms if step_ms else 0.0,
            calls_per_step=r.calls / steps,
            source="framework_op_stats",
        )
        for r in ranked
        if r.self_ms > 0
    )


# --------------------------------------------------------------------- XLA ops
_Window = tuple[int, int]


def xla_ops(
    space: Any, windows: Sequence[_Window], *, step_ms: float | None, top: int = TOP_OPS
) -> tuple[tuple[OpTime, ...], tuple[DenseWork, ...]]:
    """The ``top`` XLA executions of a JAX trace by time inside ``windows`` (the
    steps, picoseconds), per step; and the device-to-device copies of at least
    `DENSE_BYTES` among them."""
    if not windows:
        return (), ()
    spent: dict[tuple[str, str], float] = collections.defaultdict(float)
    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    copies: dict[str, list[Any]] = collections.defaultdict(lambda: [0, 0.0])
    for where, name, interval, stats in _xla_events(space):
        inside = _inside(interval, windows)
        if inside <= 0:
            continue
        key = (where, name)
        spent[key] += inside / 1e9
        calls[key] += 1
        size = _copy_size(stats)
        if where == "device" and size >= DENSE_BYTES:
            copies[name][0] = max(copies[name][0], size)
            copies[name][1] += inside / 1e9
    n = len(windows)
    ranked = sorted(spent.items(), key=lambda kv: -kv[1])[:top]
    ops = tuple(
        OpTime(
            where=where,
            type="XLA",
            name=name,
            ms_per_step=ms / n,
            share=ms / n / step_ms if step_ms else 0.0,
            calls_per_step=calls[(where, name)] / n,
            source="jax trace",
        )
        for (where, name), ms in ranked
    )
    dense = tuple(
        DenseWork(
            variable=name,
            shape=(),
            dtype="",
            bytes=int(size),
            access="copy",
            ops=(name,),
            ms_per_step=ms / n,
            share=ms / n / step_ms if step_ms else 0.0,
        )
        for name, (size, ms) in sorted(copies.items(), key=lambda kv: -kv[1][1])
    )
    return ops, dense


def _xla_events(space: Any) -> Iterable[tuple[str, str, _Window, dict[str, object]]]:
    """``(where, HLO op, interval, stats)`` of each XLA execution: host events with
    an ``hlo_op`` stat, and on a device plane its raw stream lines' kernels."""
    for plane in space.planes:
        on_device = plane.name.startswith("/device:")
        if not (on_device or plane.name.startswith("/host:")):
            continue
        names = {k: m.name for k, m in plane.event_metadata.items()}
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        lines = plane.lines
        if on_device:
            streams = [line for line in lines if line.name.startswith("Stream #")]
            lines = streams or [line for line in lines if line.name == "XLA Ops"]
        for line in lines:
            base = line.timestamp_ns * 1000
            for event in line.events:
                stats = {stat_names.get(s.metadata_id, ""): s for s in event.stats}
                hlo = stats.get("hlo_op")
                if hlo is None and not (on_device and line.name == "XLA Ops"):
                    continue
                op = (
                    str(stat_value(hlo, stat_names))
                    if hlo is not None
                    else names.get(event.metadata_id, "")
                )
                module = stats.get("hlo_module")
                if module is not None:
                    op = f"{stat_value(module, stat_names)}/{op}"
                start = base + event.offset_ps
                values = {k: stat_value(v, stat_names) for k, v in stats.items()}
                yield (
                    "device" if on_device else "host",
                    op,
                    (start, start + event.duration_ps),
                    values,
                )


def _inside(interval: _Window, windows: Sequence[_Window]) -> int:
    lo, hi = interval
    return sum(max(0, min(hi, e) - max(lo, s)) for s, e in windows)


def _copy_size(stats: Mapping[str, object]) -> int:
    details = stats.get("memcpy_details")
    if not isinstance(details, str) or "kind_src:device kind_dst:device" not in details:
        return 0
    found = _COPY_SIZE.search(details)
    return int(found[1]) if found else 0


# ------------------------------------------------------------------ dense work
def dense_work(
    rows: Sequence[_FrameworkOp],
    variable_ops: Sequence[Mapping[str, object]],
    *,
    steps: int,
    step_ms: float | None,
) -> tuple[DenseWork, ...]:
    """Whole reads and updates of variables of at least `DENSE_BYTES`: the trace's
    ops (``rows``) matched by name to the ops the capture recorded
    (`profiles._variables.record_variable_ops`), largest time first."""
    if steps <= 0:
        return ()
    recorded = [r for r in variable_ops if int(r.get("bytes", 0)) >= DENSE_BYTES]  # type: ignore[call-overload]
    by_name: dict[str, list[Mapping[str, object]]] = collections.defaultdict(list)
    for r in recorded:
        by_name[str(r["op"])].append(r)
    groups: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        access = _access(row.type)
        if access is None:
            continue
        record = _match(row.name, by_name)
        if record is None:
            continue
        copy_ms = int(record["bytes"]) / COPY_RATE.get(row.where, COPY_RATE["host"]) * 1e3  # type: ignore[call-overload]
        if access == "read" and row.self_ms / max(row.calls, 1) < copy_ms:
            continue
        key = (_variable_key(record), access)
        group = groups.setdefault(key, [record, [], 0.0])
        group[1].append(row.name)
        group[2] += row.self_ms
    out = [
        DenseWork(
            variable=str(record["variable"]) or "(a variable)",
            shape=tuple(int(d) for d in record.get("shape", ())),  # type: ignore[union-attr]
            dtype=str(record.get("dtype", "")),
            bytes=int(record["bytes"]),  # type: ignore[call-overload]
            access=access,
            ops=tuple(sorted(set(names))),
            ms_per_step=total / steps,
            share=total / steps / step_ms if step_ms else 0.0,
        )
        for (_, access), (record, names, total) in groups.items()
    ]
    return tuple(sorted(out, key=lambda d: -d.ms_per_step))


def _access(op_type: str) -> str | None:
    if op_type in DENSE_READS:
        return "read"
    if op_type in _DENSE_UPDATES or (
        op_type.startswith("ResourceApply") and "Sparse" not in op_type
    ):
        return "update"
    return None


def _match(
    name: str, by_name: Mapping[str, list[Mapping[str, object]]]
) -> Mapping[str, object] | None:
    """The recorded op of this name: exact, else the one its name ends with (a
    function inlined into another keeps its node names under the call's)."""
    found = by_name.get(name)
    if not found:
        found = [r for op, rs in by_name.items() if name.endswith("/" + op) for r in rs]
    if not found:
        return None
    sizes = {_variable_key(r) for r in found}
    return found[0] if len(sizes) == 1 else None  # two variables of one name: unknown


def _variable_key(record: Mapping[str, object]) -> str:
    return str(record.get("variable")) or f"{record.get('shape')} {record.get('dtype')}"
