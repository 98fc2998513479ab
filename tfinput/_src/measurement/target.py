"""What a measurement takes: the pipeline (`Target`) and how to measure it (`MeasureOptions`).

Both are settled once, at the entry, and passed down as they are.

`tfinput bench`, `tuners.tune` and `profiles._capture` accept a `tfinput.Pipeline`, any
object with ``build(config)`` (`Buildable`), or a callable ``config -> iterable of
batches``. `Target.of` turns each into one declared object once, at the entry, so the
code below it asks named questions (the source, the schema, the layout, the service)
instead of probing attributes.

`tfinput.bench.measure`, `tfinput.bench.roofline` (``measurement=``) and
`tuners.tune` (``TuneOptions.measurement``) take a `MeasureOptions`. Each settles its
window counts into a `WindowPlan` once (`MeasureOptions.plan`, with its own default plan)
and hands that plan down.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Union

from tfinput._src.core.config import Buildable, PipelineConfig
from tfinput._src.core.errors import ConfigError
from tfinput._src.measurement.windows import Clock, WindowPlan

if TYPE_CHECKING:
    from tfinput._src.core.layout import PackedLayout
    from tfinput._src.core.pipeline import Pipeline
    from tfinput._src.core.schema import Schema
    from tfinput._src.core.service import ServiceRead
    from tfinput._src.core.sources.protocol import Source


#: ``config -> iterable of batches``: a fresh, endless stream per call.
BatchFactory = Callable[[PipelineConfig], Iterable[Any]]


@dataclasses.dataclass(frozen=True)
class Target:
    """A pipeline to measure.

    Attributes:
      batches: ``config -> endless iterable of batches``, fresh on every call.
      pipeline: The `tfinput.Pipeline` when it is one (its source, schema, layout and
        service are then known); None for another builder or a callable.
      label: What it is, for messages.
    """

    batches: BatchFactory
    pipeline: Pipeline | None = None
    label: str = "pipeline"

    @classmethod
    def of(cls, obj: Target | Pipeline | Buildable | BatchFactory, *, what: str = "") -> Target:
        """``obj`` as a `Target`: a `Pipeline` built and repeated (inside the service
        stage when it reads through tf.data service), a `Buildable`'s ``build(config)``
        repeated, a callable as it is.

        Raises:
          ConfigError: ``obj`` is none of these (``what`` names the caller).
        """
        if isinstance(obj, Target):
            return obj
        from tfinput._src.core.pipeline import Pipeline

        if isinstance(obj, Pipeline):
            # repeat=True: repeated inside the service stage (one service job, not one
            # per epoch) when the pipeline reads through tf.data service
            return cls(batches=lambda config: obj.build(config, repeat=True), pipeline=obj)
        if isinstance(obj, Buildable) and not isinstance(obj, type):
            builder = obj
            return cls(
                batches=lambda config: builder.build(config).repeat(),
                label=type(obj).__name__,
            )
        if callable(obj):
            return cls(batches=obj, label=getattr(obj, "__name__", "callable"))
        raise ConfigError(
            f"{what or 'measure'}: target must be a tfinput Pipeline or a callable config -> "
            f"batches (or an object with build(config)), got {type(obj).__name__}"
        )

    def one_batch_repeated(self, config: PipelineConfig) -> Iterable[object]:
        """The first batch of ``config``, repeated endlessly: the step fed without any
        input cost (cached in tf.data for a builder)."""
        if self.pipeline is not None:
            return self.pipeline.build(config).take(1).cache().repeat()
        return itertools.repeat(next(iter(self.batches(config))))

    @property
    def source(self) -> Source | None:
        """The tfinput source read, when the target is a `Pipeline`."""
        return self.pipeline.source if self.pipeline is not None else None

    def rows_up_to(self, limit: int) -> int | None:
        """The rows of the target's files, counted up to ``limit`` (a larger count may
        stop at any value >= ``limit``), without building a pipeline: Parquet footers,
        columnar manifests, the first records of TFRecord files. None when there are no
        files to count (a wrapped dataset, a callable) or the source cannot count them.

        Raises:
          SourceError: a file is missing or unreadable.
        """
        from tfinput._src.core.sources.protocol import FileChecks  # a source exists: sources loaded

        source = self.source
        if not isinstance(source, FileChecks):
            return None
        files = source.files()
        return source.count_records_up_to(files, limit) if files else None

    @property
    def schema(self) -> Schema | None:
        """The schema, when the target is a `Pipeline`."""
        return self.pipeline.schema if self.pipeline is not None else None

    @property
    def layout(self) -> str:
        """The batch layout the target builds when a config leaves ``layout`` unset."""
        return self.pipeline.layout if self.pipeline is not None else "per_feature"

    @property
    def multi_hot_format(self) -> str | None:
        """``dense`` or ``ragged`` for a `Pipeline` of single-tower batches; None for
        two-tower batches (nested: no packed layout) and for other targets."""
        if self.pipeline is None or self.pipeline.towers:
            return None
        return self.pipeline.multi_hot_format

    @property
    def service(self) -> ServiceRead | None:
        """How the target reads through tf.data service; None when it reads locally."""
        return self.pipeline.service if self.pipeline is not None else None

    def packed_layout(self, config: PipelineConfig) -> PackedLayout | None:
        """Where each feature lives in a batch of ``config`` when it is packed; None
        when it is not (or the target is no `Pipeline`)."""
        if self.pipeline is None or (config.layout or self.layout) != "packed":
            return None
        return self.pipeline.packed_layout()


#: What bench, the tuner and the profiler measure: a `Pipeline`, anything with
#: ``build(config)``, a callable ``config -> batches``, or a `Target` made of one.
Measurable = Union[Target, "Pipeline", Buildable, BatchFactory]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """The window counts, the CPUs and the probes of a measurement.

    Attributes:
      warmup_batches, windows, window_batches: The `WindowPlan` (None: the measuring
        function's own plan, `BENCH_PLAN` for bench and `TUNER_PLAN` for the tuner).
      window_seconds: The least seconds of a window, its batches sized from the
        warm-up's rate (`WindowPlan.window_seconds`; 0: a fixed ``window_batches``).
        None: the plan's own target, except when ``window_batches`` is given alone,
        which asks for that fixed count.
      cpu_count: CPUs the numbers are normalized to and recorded with (None: the
        process's affinity mask).
      clock, cpu_clock, rss: Wall clock, process CPU seconds and resident memory
        probes (None: the real ones; tests pass fakes).
    """

    warmup_batches: int | None = None
    windows: int | None = None
    window_batches: int | None = None
    window_seconds: float | None = None
    cpu_count: int | None = None
    clock: Clock | None = None
    cpu_clock: Clock | None = None
    rss: Callable[[], int] | None = None

    def plan(self, default: WindowPlan, *, what: str) -> WindowPlan:
        """The window plan: the counts given here, the others ``default``'s.

        Raises:
          ConfigError: a bad count, as ``"{what}: windows must be an int >= 1, got 0"``,
            or a negative ``window_seconds``.
        """
        seconds = self.window_seconds
        if seconds is None:
            seconds = default.window_seconds if self.window_batches is None else 0.0
        return WindowPlan.checked(
            what,
            warmup_batches=_given(self.warmup_batches, default.warmup_batches),
            windows=_given(self.windows, default.windows),
            window_batches=_given(self.window_batches, default.window_batches),
            window_seconds=seconds,
        )

    def with_plan(self, plan: WindowPlan) -> MeasureOptions:
        """These options with every window count ``plan``'s: a plan settled by a caller,
        handed to a measurement whose own default plan is another."""
        return dataclasses.replace(
            self,
            warmup_batches=plan.warmup_batches,
            windows=plan.windows,
            window_batches=plan.window_batches,
            window_seconds=plan.window_seconds,
        )

    def clocks(self) -> dict[str, Clock]:
        """``clock`` and ``cpu_clock`` as keywords, only those given (so the
        measurement's own defaults apply to the others)."""
        given = {"clock": self.clock, "cpu_clock": self.cpu_clock}
        return {name: probe for name, probe in given.items() if probe is not None}


def _given(value: int | None, default: int) -> int:
    return default if value is None else value
