"""A `SparseCorePlan`'s limits and COO buffer sizes from statistics (`with_limits`,
`from_schema(limits=...)`): the statistics checked, the limits grown from them, and the
sizes jax-tpu-embedding would abort the process on refused. `tfinput.sparsecore` is the
public API."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from tfinput._src.applications.sparsecore.results import SparseCoreStats
from tfinput._src.applications.sparsecore.stacks import ALIGNMENT, embedding_module, round_up
from tfinput._src.core.errors import ConfigError


class StackedPlan(Protocol):
    """What the limits read of a plan (`SparseCorePlan`'s fields)."""

    @property
    def feature_specs(self) -> Mapping[str, Any]: ...
    @property
    def global_device_count(self) -> int: ...
    @property
    def num_sc_per_device(self) -> int: ...
    @property
    def minibatching(self) -> bool: ...


#: jax-tpu-embedding keeps the limits and buffer sizes in C++ ints.
_INT32_MAX = 2**31 - 1
#: The limits of a stack, in `SparseDenseMatmulInputStats`'s field names.
_LIMIT_FIELDS = ("max_ids_per_partition", "max_unique_ids_per_partition")
#: What `SparseCorePlan.with_limits` takes.
_STATS_FORMS = (
    "jax-tpu-embedding's SparseDenseMatmulInputStats (an FDO client's load(), "
    "LimitsExceeded.stats) or tfinput.sparsecore_stats's result"
)


def _stack_tables(specs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each stack's tables, by stack name."""
    out: dict[str, list[str]] = {}
    for f in specs.values():
        tables = out.setdefault(f.table_spec.stacked_table_spec.stack_name, [])
        if f.table_spec.name not in tables:
            tables.append(f.table_spec.name)
    return out


def _stack_label(specs: Mapping[str, Any], stack: str) -> str:
    """``stack 'a_b' (tables a, b)``."""
    return f"stack {stack!r} (tables {', '.join(_stack_tables(specs).get(stack, []))})"


def _stat_maxima(
    stats: Any, specs: Mapping[str, Any], where: str
) -> dict[str, tuple[int, int, int | None]]:
    """``stack -> (max ids, max unique ids, max buffer per SparseCore or None)`` of
    ``stats``, checked: a known form naming stacks of ``specs``, both limits of each,
    whole counts from 0 to int32, unique ids at most the ids, a buffer holding the ids,
    and an id in some stack."""
    if isinstance(stats, SparseCoreStats):
        stats = stats.input_stats()
    stacks = _stack_tables(specs)
    ids_, unique_, buffer_ = (
        getattr(stats, f, None) for f in (*_LIMIT_FIELDS, "required_buffer_size_per_sc")
    )
    if not (
        isinstance(ids_, Mapping)
        and isinstance(unique_, Mapping)
        and isinstance(buffer_ or {}, Mapping)
    ):
        hint = ""
        if isinstance(stats, Mapping):
            hint = (
                "; limits per table go to SparseCorePlan.from_schema(limits={table: "
                "(max_ids, max_unique)}). This plan's stacks and their tables: "
                + "; ".join(f"{s}: {', '.join(t)}" for s, t in sorted(stacks.items()))
            )
        raise ConfigError(f"{where}: expected {_STATS_FORMS}, got {type(stats).__name__}{hint}")
    buffer_ = buffer_ or {}
    named = {*ids_, *unique_, *buffer_}
    if not named:
        raise ConfigError(
            f"{where}: the statistics are empty (they name no stack); expected the counts "
            f"of the plan's stacks {sorted(stacks)}"
        )
    if unknown := sorted(named - set(stacks), key=str):
        raise ConfigError(
            f"{where}: the statistics name stack(s) {unknown} the plan does not have (its "
            f"stacks: {sorted(stacks)}); they were taken with another stacking"
        )
    out = {}
    for name in sorted(named):
        label = _stack_label(specs, name)
        for field, given in zip(_LIMIT_FIELDS, (ids_, unique_), strict=True):
            if name not in given:
                raise ConfigError(
                    f"{where}: {label} has no {field} in the statistics; a stack needs "
                    "both max_ids_per_partition and max_unique_ids_per_partition"
                )
        ids = _stat_max(ids_[name], label, "max_ids_per_partition", where)
        unique = _stat_max(unique_[name], label, "max_unique_ids_per_partition", where)
        buffer = (
            _stat_max(buffer_[name], label, "required_buffer_size_per_sc", where)
            if name in buffer_
            else None
        )
        if unique > ids:
            raise ConfigError(
                f"{where}: {label}: max_unique_ids_per_partition {unique:,} is above "
                f"max_ids_per_partition {ids:,}; the distinct ids of a partition are "
                "among its ids"
            )
        if buffer is not None and buffer < ids:
            raise ConfigError(
                f"{where}: {label}: required_buffer_size_per_sc {buffer:,} cannot hold "
                f"the {ids:,} ids of one partition (max_ids_per_partition); a "
                "SparseCore's buffer holds the ids of all its partitions"
            )
        out[name] = (ids, unique, buffer)
    if not any(ids for ids, _, _ in out.values()):
        raise ConfigError(
            f"{where}: the statistics count no id in any stack ({', '.join(sorted(out))}): "
            "statistics of batches with no ids (or all zeros) say nothing about the limits"
        )
    return out


def _stat_max(value: Any, label: str, field: str, where: str) -> int:
    """The largest of one stack's counts (per partition or per SparseCore), checked."""
    what = f"{where}: {label}: {field}"
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting, say
        raise ConfigError(f"{what}: expected whole numbers, got {value!r:.80}") from None
    if a.size == 0:
        raise ConfigError(f"{what} is empty; expected a count per partition (or one count)")
    if a.dtype.kind not in "iuf":
        raise ConfigError(f"{what}: expected whole numbers, got {a.dtype} ({value!r:.80})")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ConfigError(f"{what}: expected whole numbers, got NaN or infinity ({value!r:.80})")
    low, top = a.min(), a.max()
    if low < 0:
        raise ConfigError(f"{what}: expected counts >= 0, got {low}")
    if a.dtype.kind == "f" and not np.array_equal(a, np.floor(a)):
        raise ConfigError(f"{what}: expected whole numbers, got fractions ({value!r:.80})")
    if top > _INT32_MAX:
        raise ConfigError(
            f"{what}: {int(top):,} is beyond jax-tpu-embedding's int32 sizes ({_INT32_MAX:,})"
        )
    return int(top)


def check_sizes_fit(plan: StackedPlan, where: str) -> None:
    """Raise `ConfigError` for a stack whose limits or COO buffer size jax-tpu-embedding
    would abort the process on at the first batch: limits below 1 or beyond int32, or a
    buffer per device (the one given, or else the largest the limits can fill) of int32
    entries or more."""
    embedding = embedding_module()
    seen = set()
    for f in plan.feature_specs.values():
        spec = f.table_spec.stacked_table_spec
        if spec is None or spec.stack_name in seen:
            continue
        seen.add(spec.stack_name)
        label = _stack_label(plan.feature_specs, spec.stack_name)
        for field in _LIMIT_FIELDS:
            value = getattr(spec, field)
            if not 1 <= value <= _INT32_MAX:
                raise ConfigError(
                    f"{where}: {label}: {field} {value:,}; jax-tpu-embedding takes 1 to "
                    f"{_INT32_MAX:,}"
                )
        most = embedding.compute_theoretical_max_coo_buffer_size(
            spec.max_ids_per_partition,
            plan.global_device_count,
            plan.num_sc_per_device,
            enable_minibatching=plan.minibatching,
        )
        given = spec.suggested_coo_buffer_size_per_device
        if (given if given is not None else most) >= _INT32_MAX:
            raise ConfigError(
                f"{where}: {label}: max_ids_per_partition {spec.max_ids_per_partition:,} "
                f"makes a COO buffer of {most:,} entries per device (the limit rounded up "
                f"to 8, x {plan.num_sc_per_device} SparseCores per device x "
                f"{plan.num_sc_per_device * plan.global_device_count} SparseCores"
                + (" x 64 minibatches" if plan.minibatching else "")
                + f"), beyond jax-tpu-embedding's int32 sizes ({_INT32_MAX:,}): it would "
                "abort the process. Lower the limit, or size the buffer from the data "
                "(SparseCorePlan.from_schema(limits=tfinput.sparsecore_stats(...)))"
            )


def grown_specs(
    plan: StackedPlan, stats: Any, *, margin: float, shrink: bool, where: str
) -> dict[str, Any]:
    """``plan``'s feature specs (a copy) with each stack's limits and COO buffer size
    from ``stats`` (`SparseCorePlan.with_limits`: the maxima times ``1 + margin``,
    rounded up to 8; grown only, unless ``shrink``; the buffer at most what the limits
    can fill)."""
    embedding = embedding_module()
    specs = copy.deepcopy(dict(plan.feature_specs))  # shared table specs stay shared
    stacked = {}
    for f in specs.values():
        stacked[f.table_spec.stacked_table_spec.stack_name] = f.table_spec.stacked_table_spec
    maxima = _stat_maxima(stats, specs, where)
    n_sc = plan.num_sc_per_device

    def grown(name: str, field: str, value: int, current: int | None) -> int:
        scaled = value * (1 + margin)
        need = (
            max(ALIGNMENT, round_up(math.ceil(scaled), ALIGNMENT))
            if scaled <= _INT32_MAX  # also false for an infinite product
            else _INT32_MAX + 1
        )
        if need > _INT32_MAX:
            raise ConfigError(
                f"{where}: {_stack_label(specs, name)}: {field} {value:,} times 1 + "
                f"margin ({1 + margin:.4g}) is {scaled:.4g}, beyond jax-tpu-embedding's "
                f"int32 sizes ({_INT32_MAX:,}); use a smaller margin"
            )
        return need if shrink else max(need, current or 0)

    limits: dict[str, dict[str, np.ndarray]] = {f: {} for f in _LIMIT_FIELDS}
    buffers = {}
    for name, (ids, unique, buffer) in maxima.items():
        spec = stacked[name]
        for field, value in zip(_LIMIT_FIELDS, (ids, unique), strict=True):
            limits[field][name] = np.array(grown(name, field, value, getattr(spec, field)))
        if buffer is None:
            continue
        current = spec.suggested_coo_buffer_size_per_device
        field = "required_buffer_size_per_sc"
        per_sc = grown(name, field, buffer, None if current is None else -(-current // n_sc))
        # No more than the limits allow (jax-tpu-embedding aborts on a larger one).
        most = embedding.compute_theoretical_max_coo_buffer_size(
            int(limits["max_ids_per_partition"][name]),
            plan.global_device_count,
            n_sc,
            enable_minibatching=plan.minibatching,
        )
        buffers[name] = np.full(n_sc, min(per_sc, most // n_sc), np.int64)
    embedding.update_preprocessing_parameters(
        specs,
        embedding.SparseDenseMatmulInputStats(**limits, required_buffer_size_per_sc=buffers),
        num_sc_per_device=plan.num_sc_per_device,
    )
    return specs


def apply_buffer_sizes(plan: StackedPlan, stats: SparseCoreStats) -> None:
    """Each stack's COO buffer sized from the data: the measured limits and the
    ``required_buffer_size_per_sc`` `tfinput.sparsecore_stats` observed (plus its
    margin) times the SparseCores per device, through jax-tpu-embedding's
    ``update_preprocessing_parameters`` (without it the buffer is sized for the worst
    case of the limits in every partition at once), at most what the limits can fill
    (jax-tpu-embedding aborts the process on a larger buffer: the one-entry-per-SparseCore
    rule and the margin can pass it where the limits are small)."""
    embedding = embedding_module()
    by_tables = {frozenset(s.stack.tables): s.limits(stats.margin) for s in stats.stacks}
    ids, unique, buffer = {}, {}, {}
    for f in plan.feature_specs.values():
        stacked = f.table_spec.stacked_table_spec
        tables = frozenset(
            g.table_spec.name
            for g in plan.feature_specs.values()
            if g.table_spec.stacked_table_spec.stack_name == stacked.stack_name
        )
        lim = by_tables[tables]
        ids[stacked.stack_name] = np.array(lim.max_ids_per_partition)
        unique[stacked.stack_name] = np.array(lim.max_unique_ids_per_partition)
        most = embedding.compute_theoretical_max_coo_buffer_size(
            int(lim.max_ids_per_partition),
            plan.global_device_count,
            plan.num_sc_per_device,
            enable_minibatching=plan.minibatching,
        )
        per_sc = min(lim.required_buffer_size_per_sc, most // plan.num_sc_per_device)
        buffer[stacked.stack_name] = np.full(plan.num_sc_per_device, per_sc, dtype=np.int64)
    embedding.update_preprocessing_parameters(
        dict(plan.feature_specs),
        embedding.SparseDenseMatmulInputStats(
            max_ids_per_partition=ids,
            max_unique_ids_per_partition=unique,
            required_buffer_size_per_sc=buffer,
        ),
        num_sc_per_device=plan.num_sc_per_device,
    )
