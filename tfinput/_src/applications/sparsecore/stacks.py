"""SparseCore stacks: which tables share a SparseCore stack, and the constants of the
hardware. `tfinput.sparsecore` is the public API."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Schema, Table

__all__ = [
    "ACTIVATION_BYTES_LIMIT",
    "ALIGNMENT",
    "COO_ENTRY_BYTES",
    "DEFAULT_SPARSECORES_PER_DEVICE",
    "KERAS_RS_DEFAULT_LIMIT",
    "MLPERF_LIMIT",
    "Stack",
    "plan_stacks",
    "round_up",
]

#: SparseCores per chip: 4 on TPU v5p, 2 on v6e (Trillium).
DEFAULT_SPARSECORES_PER_DEVICE = 4
#: keras-rs `TableConfig` default for both limits.
KERAS_RS_DEFAULT_LIMIT = 256
#: What keras-rs's MLPerf DLRM example hard-codes for every table.
MLPERF_LIMIT = 8192
#: TPU vector register alignment: buffers are rounded up to multiples of it.
ALIGNMENT = 8
#: ``auto_stack_tables``'s default activation memory limit per stack.
ACTIVATION_BYTES_LIMIT = 2 * 1024 * 1024
#: Bytes per COO buffer entry (int32 id, int32 sample, float32 gain).
COO_ENTRY_BYTES = 12


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# ------------------------------------------------------------------ stacks
@dataclasses.dataclass(frozen=True, kw_only=True)
class Stack:
    """Tables that share one SparseCore buffer (a keras-rs / jax-tpu-embedding stack).

    Attributes:
      name: Stack name (the table name for a table alone; keras-rs's naming otherwise).
      tables: Member tables in stacking order.
      shifts: Each table's shard rotation (its id ``i`` goes to ``(i + shift) % S``).
      offsets: Each table's column offset in the stack (a multiple of ``S``).
      columns: Rows of the stacked table (each member padded to a multiple of ``8 S``).
    """

    name: str
    tables: tuple[str, ...]
    shifts: tuple[int, ...]
    offsets: tuple[int, ...]
    columns: int


def _stack_name(tables: Sequence[str]) -> str:
    """keras-rs / jax-tpu-embedding's short stack name."""
    name = "_".join(tables)
    if len(name) <= 50:
        return name
    return name[:50] + "..." + hashlib.sha256(name.encode()).hexdigest()[:12]


def _auto_groups(
    order: list[str], used: dict[str, list[str]], tables: dict[str, Table], per_sparsecore: int
) -> list[list[str]]:
    """keras-rs's automatic stacking: tables of one padded width and combiner stacked
    while their activations fit `ACTIVATION_BYTES_LIMIT`."""
    keyed: dict[tuple[int, str], list[str]] = {}
    for t in order:
        key = (round_up(tables[t].dim, ALIGNMENT), tables[t].combiner)
        keyed.setdefault(key, []).append(t)
    samples = {t: len(used[t]) * per_sparsecore for t in order}
    groups = []
    for group in keyed.values():
        split: list[list[str]] = []
        for t in group:
            cost = round_up(tables[t].dim, ALIGNMENT) * samples[t] * 4
            for candidate in split:
                held = sum(round_up(tables[c].dim, ALIGNMENT) * samples[c] * 4 for c in candidate)
                if held + cost <= ACTIVATION_BYTES_LIMIT:
                    candidate.append(t)
                    break
            else:
                split.append([t])
        groups.extend(split)
    return groups


def _given_groups(
    stacking: Sequence[Sequence[str] | str],
    order: list[str],
    used: dict[str, list[str]],
    tables: dict[str, Table],
) -> list[list[str]]:
    """The user's stacks (checked), then every other used table alone."""
    groups = []
    seen: set[str] = set()
    for group in stacking:
        group = [group] if isinstance(group, str) else list(group)
        for t in group:
            if t not in tables:
                raise ConfigError(
                    f"stacking: no table {t!r} in the schema; tables: {sorted(tables)}"
                )
            if t in seen:
                raise ConfigError(f"stacking: table {t!r} is in more than one stack")
            seen.add(t)
        combiners = {tables[t].combiner for t in group}
        if len(combiners) > 1:
            raise ConfigError(
                f"stacking: tables {group} have different combiners {sorted(combiners)}; "
                "keras-rs stacks only tables with the same combiner and optimizer"
            )
        group = [t for t in group if t in used]
        if group:
            groups.append(group)
    groups.extend([t] for t in order if t not in seen)
    return groups


def plan_stacks(
    schema: Schema,
    *,
    global_batch_size: int,
    devices: int,
    sparsecores_per_device: int = DEFAULT_SPARSECORES_PER_DEVICE,
    stacking: str | Sequence[Sequence[str]] | None = "auto",
) -> tuple[Stack, ...]:
    """Group the schema's tables into stacks and place each table in its stack.

    Args:
      schema: The schema; every table that a feature uses takes part.
      global_batch_size: Rows per step on all devices (``per_replica * devices``).
      devices: Chips (TPU devices) in all.
      sparsecores_per_device: SparseCores per chip.
      stacking: ``"auto"`` (keras-rs's default on JAX), None or ``"none"`` (every table
        alone), or lists of table names stacked together (other tables stay alone).

    Returns:
      The stacks, in a stable order.

    Raises:
      ConfigError: an unknown or repeated table, or stacked tables whose combiners differ.
    """
    num_sc = devices * sparsecores_per_device
    used: dict[str, list[str]] = {}
    for f in sorted(schema.categorical, key=lambda f: f.name):
        used.setdefault(f.table, []).append(f.name)
    order = list(used)  # by first feature name, as jax.tree.leaves orders a dict
    tables = {t.name: t for t in schema.tables}
    groups: list[list[str]]
    if stacking is None or stacking == "none":
        groups = [[t] for t in order]
    elif stacking == "auto":
        groups = _auto_groups(order, used, tables, global_batch_size // num_sc)
    elif isinstance(stacking, str):
        raise ConfigError(
            f'stacking: expected "auto", "none" or lists of table names, got {stacking!r}'
        )
    else:
        groups = _given_groups(stacking, order, used, tables)
    stacks = []
    for group in groups:
        shifts, offsets, rows = [], [], 0
        for i, t in enumerate(group):
            shifts.append((i * sparsecores_per_device) % num_sc)
            offsets.append(rows)
            rows += round_up(tables[t].vocabulary_size, ALIGNMENT * num_sc)
        stacks.append(
            Stack(
                name=_stack_name(group),
                tables=tuple(group),
                shifts=tuple(shifts),
                offsets=tuple(offsets),
                columns=rows,
            )
        )
    return tuple(stacks)
