"""What the measurement takes: a pipeline, declared (`Target`), whatever form it came in.

`tfinput bench`, `tuners.tune` and `profiles._capture` accept a `tfinput.Pipeline`, any
object with ``build(config)`` (`Buildable`), or a callable ``config -> iterable of
batches``. `Target.of` turns each into one declared object once, at the entry, so the
code below it asks named questions (the source, the schema, the layout, the service)
instead of probing attributes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Union

from tfinput._src.core.config import Buildable, PipelineConfig
from tfinput._src.core.errors import ConfigError

if TYPE_CHECKING:  # the pipeline module imports TensorFlow: on first use only
    from tfinput._src.core.layout import PackedLayout
    from tfinput._src.core.pipeline import Pipeline
    from tfinput._src.core.schema import Schema
    from tfinput._src.core.service import ServiceRead
    from tfinput._src.core.sources.protocol import Source

__all__ = ["BatchFactory", "Buildable", "Measurable", "Target"]

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

    def one_batch_repeated(self, config: PipelineConfig) -> Iterable[Any]:
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
