"""`PipelineConfig`: every tunable knob of a tfinput pipeline, in one frozen object.

A pipeline definition (`tfinput.Pipeline`) says *what* to read and how to turn it into
batches; a `PipelineConfig` says *how fast*: parallelism, prefetching, buffering. The
same definition builds with any config, which is what lets the tuner search configs.

Each knob maps onto one tf.data argument. Knobs that tf.data can tune accept
`AUTOTUNE`; for the others `AUTOTUNE` means "leave tf.data's own default".
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.options import load_json

#: Values of ``PipelineConfig.service_compression``.
SERVICE_COMPRESSIONS = ("AUTO", None)
#: Batch layouts (`PipelineConfig.layout`, `Pipeline.with_layout`).
LAYOUTS = ("per_feature", "packed")

#: Same value as `tf.data.AUTOTUNE`, importable without TensorFlow.
AUTOTUNE = -1

_AUTOTUNE_JSON = "autotune"


#: Each int knob: (its minimum, whether AUTOTUNE (-1) is accepted), in checking order.
_INT_KNOBS = {
    "batch_size": (1, False),
    "interleave_cycle_length": (1, True),
    "interleave_block_length": (1, True),
    "interleave_parallelism": (1, True),
    "map_parallelism": (1, True),
    "prefetch": (0, True),
    "shuffle_buffer": (0, False),
    "read_batch": (0, False),
    "private_threadpool_size": (0, True),
    "max_intra_op_parallelism": (1, True),
    "autotune_ram_budget": (1, True),
    "autotune_min_parallelism": (1, True),
    "steps_per_execution": (1, False),
    "device_prefetch": (0, False),
    "sparsecore_workers": (0, False),
    "sparsecore_prefetch": (0, False),
    "service_workers": (0, False),
    "service_max_outstanding_requests": (1, True),
}


def _check_knob(name: str, value: object, *, minimum: int, autotune: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"PipelineConfig.{name}: expected an int{' or AUTOTUNE' if autotune else ''}, "
            f"got {value!r} ({type(value).__name__})"
        )
    if autotune and value == AUTOTUNE:
        return
    if value < minimum:
        allowed = f">= {minimum}" + (" or AUTOTUNE (-1)" if autotune else "")
        raise ConfigError(f"PipelineConfig.{name}: expected {allowed}, got {value}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The performance knobs of one pipeline build.

    Attributes:
      batch_size: Global batch size. Inside `distribute_datasets_from_function` each
        input pipeline batches `input_context.get_per_replica_batch_size(batch_size)`.
        Larger batches amortise per-batch overhead (vectorized parsing) but change the
        optimisation; the tuner only changes it when allowed to.
      drop_remainder: Drop the last partial batch. Must stay True for static shapes
        (TPU, XLA); False is only useful for evaluation on CPU.
      interleave_cycle_length: Files read concurrently (`interleave(cycle_length)`).
        More files in flight hides I/O latency but costs memory and, on few cores, CPU
        that the parser needs. Parquet: files read ahead by pyarrow.
      interleave_block_length: Consecutive elements taken from one file before moving
        on (TFRecord: mini-batches of ``read_batch`` records, or single records with
        ``read_batch=0``). Larger blocks mix files less. AUTOTUNE means tf.data's
        default (1).
      interleave_parallelism: Threads reading files (`interleave(num_parallel_calls)`).
        Parquet: 1 reads single-threaded, anything else lets pyarrow use its pool.
      map_parallelism: Batches parsed and transformed concurrently
        (`map(num_parallel_calls)`). Usually the most important knob: parsing is the
        dominant CPU cost. Too high oversubscribes the cores.
      prefetch: Batches buffered ahead of the consumer (`prefetch(buffer_size)`). Hides
        jitter between input and training step at the cost of memory (one batch each).
      shuffle_buffer: Records held for shuffling; 0 disables shuffling of records.
        Bigger buffers shuffle better, cost memory and a slower start. TFRecord with
        ``read_batch``: the buffer takes its records a window of ``max(shuffle_buffer
        // 2, 256)`` at a time, so up to one window more is held. Sources that read
        batches shuffle their rows in windows of the buffer rounded up to whole
        batches, at least two (Parquet, wrapped batches), and columnar records hold
        whole chunks, at least two, permuting rows in windows of chunks for batches
        under two chunks: rows cross batch boundaries at any buffer, on every source.
      shuffle_seed: Seed for file and record shuffling; None draws a fresh seed.
      read_batch: TFRecord: records each file's branch of the parallel read batches
        before they leave it; the consumer side (shuffle, re-cut to ``batch_size``,
        parse) then handles mini-batches instead of single records, whose one-at-a-time
        hand-over caps tf.Example input whatever the cores. A shuffle still mixes
        single records: the buffer of ``shuffle_buffer`` records runs a window at a
        time with vectorized ops, so a batch mixes as well as with records handed over
        one at a time at the same buffer; with a shuffle, mini-batches hold at most
        ``(shuffle_buffer + window) // 32`` records, so that the buffer holds many of
        them. 0 or 1: records cross one at a time (tf.data's own shuffle). Default 64
        (benchmarks/RESULTS.md, "records batched in the file branches" and "Mixing at
        every batch size").
        Ignored by other sources.
      private_threadpool_size: Size of a thread pool private to this pipeline; 0 or
        AUTOTUNE shares TensorFlow's inter-op pool. A private pool isolates the input
        pipeline from the training step's ops.
      max_intra_op_parallelism: Threads one tf.data op may use internally; 1 disables
        intra-op parallelism (often best when map parallelism is already high).
        AUTOTUNE leaves tf.data's default.
      deterministic: Keep element order fixed. False lets a slow element be overtaken,
        which smooths throughput; order then varies between runs (each element is still
        delivered exactly once). AUTOTUNE leaves tf.data's default (deterministic).
      cache: Cache the records after the first epoch (in memory). Saves reading and
        decompressing from the second epoch on; needs the data to fit in RAM.
      autotune_ram_budget: Bytes tf.data's autotuner may use for buffers; AUTOTUNE
        leaves tf.data's default (half of the machine's RAM).
      autotune_min_parallelism: The least threads tf.data's autotuner gives a map (and
        batch) whose parallelism is AUTOTUNE (``Options.autotune.min_parallelism``,
        TensorFlow 2.20 and later): a higher start shortens the autotuner's warm-up.
        AUTOTUNE leaves tf.data's default; a TensorFlow without the option ignores it,
        with a warning.
      layout: ``"per_feature"`` (one tensor per feature, grouped as ``dense``/``ids``/
        ``weights``) or ``"packed"`` (a few large tensors plus a
        `tfinput.layout.PackedLayout` that slices them back); None keeps the
        pipeline's own (`Pipeline.with_layout`, ``per_feature`` by default). Packing
        makes a host-to-device transfer a handful of arrays instead of one per feature.
      steps_per_execution: Training steps run per call into the compiled step
        (Keras ``compile(steps_per_execution=...)``), read by the ``keras_fit`` step.
        More steps per call amortise the host's dispatch overhead.
      device_prefetch: Batches moved onto the device ahead of the step by the step's
        feeder (`tfinput.device_prefetch`); 0 feeds each batch when the step asks.
      sparsecore_workers: Threads running SparseCore preprocessing ahead of the step,
        read by a step that feeds SparseCore
        (`tfinput.sparsecore.sparsecore_step`); 0 preprocesses each
        batch on the training thread when the step asks (keras-rs's generator pattern).
      sparsecore_prefetch: Preprocessed batches held ready for such a step; 0: twice
        ``sparsecore_workers``.
      service_workers: For a pipeline read through tf.data service
        (`Pipeline.with_service`): the workers serving it. With a
        `tfinput.service.LocalFleet` the build uses a cluster of exactly that many
        worker processes; with a dispatcher address it must be 0 or the address's
        worker count (`with_service(..., workers=N)`). 0: all of them. Ignored by a
        pipeline read locally.
      service_compression: ``"AUTO"`` (tf.data service compresses batches with snappy
        where it helps) or None (no compression: saves worker and client CPU on
        already compact ids and floats). Service pipelines only.
      service_max_outstanding_requests: Batches requested from the workers at once
        (bounds the client's memory); AUTOTUNE leaves tf.data's default (one per
        worker). Service pipelines only.
    """

    batch_size: int = 4096
    drop_remainder: bool = True
    interleave_cycle_length: int = AUTOTUNE
    interleave_block_length: int = AUTOTUNE
    interleave_parallelism: int = AUTOTUNE
    map_parallelism: int = AUTOTUNE
    prefetch: int = AUTOTUNE
    shuffle_buffer: int = 0
    shuffle_seed: int | None = None
    read_batch: int = 64
    private_threadpool_size: int = AUTOTUNE
    max_intra_op_parallelism: int = AUTOTUNE
    deterministic: bool | int = AUTOTUNE
    cache: bool = False
    autotune_ram_budget: int = AUTOTUNE
    autotune_min_parallelism: int = AUTOTUNE
    layout: str | None = None
    steps_per_execution: int = 1
    device_prefetch: int = 0
    sparsecore_workers: int = 2
    sparsecore_prefetch: int = 0
    service_workers: int = 0
    service_compression: str | None = "AUTO"
    service_max_outstanding_requests: int = AUTOTUNE

    def __post_init__(self) -> None:
        for name, (minimum, autotune) in _INT_KNOBS.items():
            _check_knob(name, getattr(self, name), minimum=minimum, autotune=autotune)
        if self.service_compression not in SERVICE_COMPRESSIONS:
            raise ConfigError(
                'PipelineConfig.service_compression: expected "AUTO" or null, '
                f"got {self.service_compression!r}"
            )
        if self.layout not in LAYOUTS + (None,):
            raise ConfigError(
                f"PipelineConfig.layout: expected one of {list(LAYOUTS)} or null, "
                f"got {self.layout!r}"
            )
        for name in ("drop_remainder", "cache"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"PipelineConfig.{name}: expected true or false, got {getattr(self, name)!r}"
                )
        if self.deterministic is not AUTOTUNE and not isinstance(self.deterministic, bool):
            raise ConfigError(
                "PipelineConfig.deterministic: expected true, false or AUTOTUNE, "
                f"got {self.deterministic!r}"
            )
        if self.shuffle_seed is not None and (
            isinstance(self.shuffle_seed, bool) or not isinstance(self.shuffle_seed, int)
        ):
            raise ConfigError(
                f"PipelineConfig.shuffle_seed: expected an int or null, got {self.shuffle_seed!r}"
            )

    # ----------------------------------------------------------------- presets
    @classmethod
    def naive(cls, **overrides: Any) -> PipelineConfig:
        """No parallelism and no prefetching: the slowest sensible pipeline."""
        base = dict(
            interleave_cycle_length=1,
            interleave_block_length=1,
            interleave_parallelism=1,
            map_parallelism=1,
            prefetch=0,
            deterministic=True,
            read_batch=0,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def heuristic(cls, *, cpu_count: int | None = None, **overrides: Any) -> PipelineConfig:
        """The rule of thumb: parallelism = number of cores, prefetch 2."""
        cores = cpu_count or os.cpu_count() or 1
        base = dict(
            interleave_cycle_length=cores,
            interleave_block_length=1,
            interleave_parallelism=cores,
            map_parallelism=cores,
            prefetch=2,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def autotune(cls, **overrides: Any) -> PipelineConfig:
        """Every knob AUTOTUNE: the layout TensorFlow's performance guide recommends."""
        return cls(**overrides)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> PipelineConfig:
        """A preset by name: ``naive``, ``heuristic`` or ``autotune``."""
        presets = {"naive": cls.naive, "heuristic": cls.heuristic, "autotune": cls.autotune}
        if name not in presets:
            raise ConfigError(f"unknown preset {name!r}; expected one of {sorted(presets)}")
        return presets[name](**overrides)

    # -------------------------------------------------------------------- JSON
    def replace(self, **changes: Any) -> PipelineConfig:
        """A copy with some knobs changed (validated like the constructor)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(
                f"PipelineConfig has no knob(s) {sorted(unknown)}; knobs: {knob_names()}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; AUTOTUNE is written as the string ``"autotune"``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is AUTOTUNE or (value == AUTOTUNE and not isinstance(value, bool)):
                value = _AUTOTUNE_JSON
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineConfig:
        """Inverse of `to_dict`. Also accepts a saved tuner result ``{"config": {...}}``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"PipelineConfig: expected a JSON object, got {type(data).__name__}")
        if "config" in data and isinstance(data["config"], Mapping):
            data = data["config"]
        unknown = set(data) - set(knob_names())
        if unknown:
            raise ConfigError(
                f"PipelineConfig: unknown knob(s) {sorted(unknown)}; knobs: {knob_names()}"
            )
        values = {k: (AUTOTUNE if v == _AUTOTUNE_JSON else v) for k, v in data.items()}
        return cls(**values)

    def to_json(self, path: str | os.PathLike[str] | None = None, **extra: Any) -> str:
        """Serialise; with ``path`` also write the file. ``extra`` adds top-level keys
        (for example a hardware fingerprint) next to ``"config"``."""
        text = json.dumps({"config": self.to_dict(), **extra}, indent=2, sort_keys=False)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, path_or_text: str | os.PathLike[str]) -> PipelineConfig:
        """Load from a JSON file path or a JSON string."""
        data, _ = load_json(path_or_text, ConfigError, "config")
        return cls.from_dict(data)


def knob_names() -> list[str]:
    """The names of every field of `PipelineConfig`, in declaration order."""
    return [f.name for f in dataclasses.fields(PipelineConfig)]


@runtime_checkable
class Buildable(Protocol):
    """An object whose ``build(config)`` returns a ``tf.data.Dataset`` (a
    `tfinput.Pipeline`, or a user's own builder). `tfinput._src.measurement.target` exports it."""

    def build(self, config: PipelineConfig) -> Any: ...
