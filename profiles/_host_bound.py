"""xprof's host-bound rule (``xprof check_host_boundness``), applied to a run's traces.

xprof 2.24 calls a TPU run host-bound only when four conditions hold together:

- **idle**: the TPU idles more than 10% of the profiled steps' time (the steps' total
  time, from the overview page, minus the time of the XLA ops its op profile finds on
  the device: compute, memory copies, interconnect collectives; barrier waits left out);
- **matrix units idle** more than 70% (the hardware counters: "No MXU Busy");
- **memory bandwidth** under 30% of its peak (counters: "HBM Rd+Wr");
- **interconnect** under 30% both ways (counters: "ICI (Read)", "ICI (Write)").

Otherwise it is not host-bound, or "unknown" when the TPU's duty cycle is over 50% but
the op times are missing, or there is too little data without steps. Its inputs come
from four of xprof's tools: ``overview_page`` (steps, step time, cores, duty cycle),
``op_profile`` grouped by category (the device's XLA op times), the trace's
``barrier-cores`` events, and ``utilization_viewer`` (the counters, which xprof 2.24
reads on TPU v6e and v7 only; it counts a counter it cannot read as 0%).

`check` gathers those inputs with the same converters and applies the same rule
(`XPROF_THRESHOLDS`, tested against the installed xprof's own function), and says which
inputs a trace lacks: on a CPU or GPU run, and on a TPU run captured without its
counters, the rule has nothing to judge and the report says so instead of a verdict.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from profiles._xplane import XSpaceFile
from profiles._xprof import cell_number, table_rows, xprof_tables

#: xprof 2.24's thresholds (``xprof/cli/tools/check_host_boundness_tool.py``), in %:
#: idle above, matrix units idle above, memory bandwidth below, interconnect below,
#: and the duty cycle above which missing op times make the verdict unknown.
XPROF_THRESHOLDS: Mapping[str, float] = {
    "idle": 10.0,
    "mxu_idle": 70.0,
    "hbm": 30.0,
    "ici": 30.0,
    "duty_cycle": 50.0,
}

#: The inputs, by the names the report uses.
INPUTS = (
    "step times",
    "XLA op times on the TPU",
    "matrix-unit idleness",
    "memory bandwidth",
    "interconnect bandwidth",
)
_ICI = (
    "all-reduce",
    "all-gather",
    "all-to-all",
    "reduce-scatter",
    "collective-broadcast",
    "collective-permute",
)
_HBM = ("copy-start", "copy", "copy-done")
_SENTINEL = float(0xFFFFFFFFFFFFFFFF) * 0.999


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostBoundCheck:
    """xprof's host-bound rule on one run.

    Attributes:
      status: xprof's verdict (``HOST_BOUND``, ``NOT_HOST_BOUND``, ``UNKNOWN``,
        ``INSUFFICIENT_DATA``), or ``""`` when the trace lacks what the rule judges
        (no TPU, no op times, no matrix-unit counters): see ``missing``.
      missing: The inputs the trace lacks (`INPUTS` names).
      metrics: The rule's figures: ``idle_percent``, ``mxu_idle_percent``,
        ``hbm_percent``, ``ici_read_percent``, ``ici_write_percent``,
        ``duty_cycle_percent``, ``total_ms``, ``steps``, ``cores``; those it could not
        read are absent.
      failed: The conditions that did not hold, as sentences (empty when host-bound).
    """

    status: str
    missing: tuple[str, ...]
    metrics: Mapping[str, float]
    failed: tuple[str, ...] = ()

    @property
    def applies(self) -> bool:
        """Whether the trace has what the rule judges (a verdict is given)."""
        return bool(self.status)

    @property
    def host_bound(self) -> bool | None:
        """True or False by xprof's rule; None when it gives no yes-or-no verdict."""
        if self.status == "HOST_BOUND":
            return True
        if self.status == "NOT_HOST_BOUND":
            return False
        return None

    @property
    def summary(self) -> str:
        """One line: the verdict with its figures, or what is missing."""
        if not self.applies:
            return (
                f"not applicable: the trace has no {', no '.join(self.missing)} (the rule "
                "judges a TPU run from its op times and hardware counters)"
            )
        m = self.metrics
        figures = (
            f"idle {m.get('idle_percent', 0):.1f}%, matrix units idle "
            f"{m.get('mxu_idle_percent', 0):.1f}%, memory bandwidth "
            f"{m.get('hbm_percent', 0):.1f}%, interconnect {m.get('ici_read_percent', 0):.1f}% "
            f"read / {m.get('ici_write_percent', 0):.1f}% write"
        )
        text = f"{self.status.replace('_', '-').lower()} ({figures})"
        counted = [i for i in self.missing if i in ("memory bandwidth", "interconnect bandwidth")]
        if counted:
            text += f"; no {' or '.join(counted)} counters in the trace: xprof counts them as 0%"
        return text

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (with ``summary``)."""
        return {
            "status": self.status,
            "missing": list(self.missing),
            "metrics": dict(self.metrics),
            "failed": list(self.failed),
            "summary": self.summary,
        }


def check(
    xfiles: Sequence[XSpaceFile], overview: Any, *, paths: Sequence[Any] = ()
) -> HostBoundCheck:
    """xprof's host-bound rule on a run.

    Args:
      xfiles: The run's parsed traces.
      overview: xprof's ``overview_page`` tables of the run.
      paths: The run's trace files, for the converters the rule needs beyond the
        overview (run only when a trace has a TPU).

    Returns:
      The verdict and its figures, or what the trace lacks.
    """
    steps, step_ms, cores, duty = _overview(overview)
    metrics: dict[str, float] = {"steps": steps, "cores": cores, "duty_cycle_percent": duty}
    missing = [] if steps and step_ms > 0 else ["step times"]
    tpu = any(p.name.startswith("/device:TPU:") for xf in xfiles for p in xf.space.planes)
    if not tpu:
        missing += INPUTS[1:]
        return HostBoundCheck(status="", missing=tuple(missing), metrics=metrics)
    tools = xprof_tables(
        paths,
        ("op_profile", *(("utilization_viewer",) if len(paths) == 1 else ())),
        {"op_profile": {"group_by": "category"}},
    )
    op_times = _op_times(tools["op_profile"])
    counters = _counters(tools.get("utilization_viewer"))
    if op_times is None or not any(op_times):
        missing.append("XLA op times on the TPU")
    for name, key in (
        ("matrix-unit idleness", "mxu_idle_percent"),
        ("memory bandwidth", "hbm_percent"),
        ("interconnect bandwidth", "ici_read_percent"),
    ):
        if key not in counters:
            missing.append(name)
    metrics.update(counters)
    blocking = [i for i in missing if i not in ("memory bandwidth", "interconnect bandwidth")]
    if blocking and blocking != ["step times"]:
        return HostBoundCheck(status="", missing=tuple(missing), metrics=metrics)
    barrier_ms = _barrier_ms(xfiles, steps)
    return _verdict(
        steps=steps,
        step_ms=step_ms,
        cores=cores,
        duty=duty,
        op_times=op_times,
        barrier_ms=barrier_ms,
        metrics=metrics,
        missing=tuple(missing),
    )


def _verdict(
    *,
    steps: int,
    step_ms: float,
    cores: int,
    duty: float,
    op_times: tuple[float, float, float] | None,
    barrier_ms: float,
    metrics: dict[str, float],
    missing: tuple[str, ...],
) -> HostBoundCheck:
    """The rule, as xprof 2.24 applies it to its inputs."""
    total = step_ms * steps
    metrics["total_ms"] = total
    if total == 0 or steps == 0:
        return HostBoundCheck(status="INSUFFICIENT_DATA", missing=missing, metrics=metrics)
    limits = XPROF_THRESHOLDS
    idle = 0.0
    if op_times is not None:
        busy = sum(t / 1e9 / cores for t in op_times)
        pure_idle = max(0.0, total - busy - barrier_ms)
        idle = min(1.0, max(0.0, pure_idle / total)) * 100
    metrics["idle_percent"] = idle
    mxu = metrics.setdefault("mxu_idle_percent", 0.0)
    hbm = metrics.setdefault("hbm_percent", 0.0)
    ici_r = metrics.setdefault("ici_read_percent", 0.0)
    ici_w = metrics.setdefault("ici_write_percent", 0.0)
    conditions = (
        (idle > limits["idle"], f"idle {idle:.1f}% is not above {limits['idle']:.0f}%"),
        (
            mxu > limits["mxu_idle"],
            f"matrix units idle {mxu:.1f}% is not above {limits['mxu_idle']:.0f}%",
        ),
        (hbm < limits["hbm"], f"memory bandwidth {hbm:.1f}% is not under {limits['hbm']:.0f}%"),
        (
            ici_r < limits["ici"] and ici_w < limits["ici"],
            f"interconnect {ici_r:.1f}% read / {ici_w:.1f}% write is not under "
            f"{limits['ici']:.0f}%",
        ),
    )
    failed = tuple(why for holds, why in conditions if not holds)
    if not failed:
        status = "HOST_BOUND"
    elif duty > limits["duty_cycle"] and (op_times is None or idle <= limits["idle"]):
        status = "UNKNOWN" if op_times is None else "NOT_HOST_BOUND"
    else:
        status = "NOT_HOST_BOUND"
    return HostBoundCheck(status=status, missing=missing, metrics=metrics, failed=failed)


# ------------------------------------------------------------------- inputs
def _overview(tables: Any) -> tuple[int, float, int, float]:
    """``(steps, mean step ms, device cores, duty cycle %)`` from the overview page."""
    steps, step_ms, cores, duty = 0, 0.0, 1, 0.0
    for table in tables if isinstance(tables, list) else ():
        props = table.get("p") or {} if isinstance(table, Mapping) else {}
        if "steptime_ms_average" in props:
            steps = len(table.get("rows") or [])
            step_ms = _number(props.get("steptime_ms_average"))
        if "device_duty_cycle_percent" in props:
            duty = _number(props.get("device_duty_cycle_percent"))
        if "device_core_count" in props:
            cores = max(1, int(_number(props.get("device_core_count")) or 1))
    return steps, step_ms, cores, duty


def _number(text: Any) -> float:
    found = re.search(r"[\d.]+", str(text))
    return float(found.group()) if found else 0.0


def _op_times(profile: Any) -> tuple[float, float, float] | None:
    """``(compute, memory copies, interconnect)`` picoseconds of the device's XLA ops,
    the leaves of the op profile grouped by category; None without a profile."""
    if not isinstance(profile, Mapping):
        return None
    root = profile.get("byCategory") or profile.get("by_category")
    if not isinstance(root, Mapping):
        return None
    totals = [0.0, 0.0, 0.0]
    stack = [root]
    while stack:
        node = stack.pop()
        children = [c for c in node.get("children") or () if isinstance(c, Mapping)]
        metrics = node.get("metrics") if isinstance(node.get("metrics"), Mapping) else {}
        if not children and metrics.get("occurrences", 0) > 0:
            name = str(node.get("name", "")).lower()
            xla = node.get("xla") if isinstance(node.get("xla"), Mapping) else {}
            category = str(xla.get("category", "")).lower()
            time = float(metrics.get("rawTime", 0.0) or 0.0)
            if any(p in name or p in category for p in _ICI):
                totals[2] += time
            elif any(p in name or p in category for p in _HBM):
                totals[1] += time
            else:
                totals[0] += time
        stack.extend(children)
    return (totals[0], totals[1], totals[2])


def _counters(table: Any) -> dict[str, float]:
    """The counters' percentages (cycle-weighted over the capture) of the first host,
    device 0, node 0, as xprof reads them; a counter not in the trace is absent."""
    if not isinstance(table, Mapping):
        return {}
    rows = [r for r in table_rows(table) if r.get("name")]
    hosts = sorted({int(cell_number(r.get("host"))) for r in rows})
    rows = [
        r
        for r in rows
        if int(cell_number(r.get("host"))) == (hosts[0] if hosts else 0)
        and int(cell_number(r.get("device"))) == 0
        and int(cell_number(r.get("node"))) == 0
    ]
    out: dict[str, float] = {}
    mxu = _percent(rows, "No MXU Busy")
    units = [p for n in _names(rows, r"MXU\d+") if (p := _percent(rows, n)) is not None]
    average = _percent(rows, "Avg MXU Busy")
    if mxu is not None:
        out["mxu_idle_percent"] = mxu
    elif units:
        out["mxu_idle_percent"] = max(0.0, 100 - max(units))
    elif average is not None:
        out["mxu_idle_percent"] = 100 - average
    for key, names in (
        ("hbm_percent", ("HBM Rd+Wr (per chip)", "HBM Rd+Wr")),
        ("ici_read_percent", ("ICI (Read)",)),
        ("ici_write_percent", ("ICI (Write)",)),
    ):
        for name in names:
            value = _percent(rows, name)
            if value is not None:
                out[key] = value
                break
    if "ici_read_percent" in out or "ici_write_percent" in out:
        out.setdefault("ici_read_percent", 0.0)
        out.setdefault("ici_write_percent", 0.0)
    return out


def _names(rows: Sequence[Mapping[str, object]], pattern: str) -> list[str]:
    return sorted({str(r["name"]) for r in rows if re.fullmatch(pattern, str(r["name"]))})


def _percent(rows: Sequence[Mapping[str, object]], metric: str) -> float | None:
    """Achieved over peak of one metric (or its per-core rows) over every sample."""
    chosen = [
        r for r in rows if r["name"] == metric or str(r["name"]).startswith(f"{metric} - core ")
    ]
    achieved = peak = 0.0
    usable = 0
    for r in chosen:
        a, p = cell_number(r.get("achieved")), cell_number(r.get("peak"))
        if a >= _SENTINEL or p >= _SENTINEL or p < 0:
            continue
        usable += 1
        achieved += a
        peak += p
    if not usable:
        return None
    if peak <= 0:
        return 0.0 if achieved == 0 else None
    return round(achieved * 100 / peak, 2)


def _barrier_ms(xfiles: Sequence[XSpaceFile], steps: int) -> float:
    """The mean ``barrier-cores`` wait on the first TPU, times the steps."""
    durations = []
    for xf in xfiles:
        for plane in xf.space.planes:
            if plane.name != "/device:TPU:0":
                continue
            barrier = {k for k, m in plane.event_metadata.items() if m.name == "barrier-cores"}
            durations += [
                e.duration_ps
                for line in plane.lines
                for e in line.events
                if e.metadata_id in barrier
            ]
        if durations:
            break
    if not durations or not steps:
        return 0.0
    return sum(durations) / len(durations) / 1e9 * steps
