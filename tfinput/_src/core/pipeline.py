"""`Pipeline`: an immutable pipeline definition that builds with any `PipelineConfig`.

    import tfinput
    schema = tfinput.Schema.from_json("schema.json")
    pipeline = tfinput.tfrecord("data/train-*.tfrecord", schema)
    ds = pipeline.build(tfinput.PipelineConfig(batch_size=4096, map_parallelism=3))

The built dataset has the layout tf.data's performance guide recommends, the same
skeleton for every source (`tfinput._src.core.sources.protocol.Source` supplies the steps that differ)::

    shard files -> [shuffle files] -> interleave(read) -> [cache] -> [shuffle records]
          -> batch(B, drop_remainder) -> map(parse + transform [+ pack], parallel)
          -> prefetch -> options

With the ``packed`` layout (`Pipeline.with_layout`, ``PipelineConfig.layout``) the same
map also concatenates the features into a few large tensors (`tfinput.layout`).

Every method returns a new `Pipeline`; a definition is plain data, so the tuner can
build it again and again with different configs.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfinput._src.core._input_files import epoch_rows
from tfinput._src.core._pipeline_check import CheckReport, check_files, explain_failure
from tfinput._src.core._pipeline_parts import (
    check_towers,
    checked_config,
    file_versions,
    pipeline_options,
    read_request,
    records,
    split_towers,
    warn_large_padded_batches,
)
from tfinput._src.core._python_calls import guard_exit
from tfinput._src.core.columnar.source import ColumnarSource
from tfinput._src.core.config import LAYOUTS, PipelineConfig
from tfinput._src.core.errors import ConfigError, DataError, ResumeError, without_locals
from tfinput._src.core.files import PathsLike, as_paths
from tfinput._src.core.layout import PackedLayout
from tfinput._src.core.schema import Schema
from tfinput._src.core.service import Fleet, ServiceRead
from tfinput._src.core.service.guard import DEFAULT_STALL_TIMEOUT_S
from tfinput._src.core.sources.dataset import DatasetSource
from tfinput._src.core.sources.parquet import ParquetSource
from tfinput._src.core.sources.protocol import (
    Decode,
    ReadRequest,
    RestartsOrder,
    RooflineStages,
    Source,
    deterministic_arg,
    parallel_calls,
    read_parallelism,
    warn_unhonoured,
)
from tfinput._src.core.sources.tfrecord import TFRecordSource
from tfinput._src.core.transforms import MULTI_HOT_FORMATS, transform_batch

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.core._input_iterator import InputIterator

log = logging.getLogger("tfinput")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A pipeline definition: a source, a schema and output options.

    Attributes:
      source: Where records come from: any `tfinput._src.core.sources.protocol.Source` (`TFRecordSource`,
        `ParquetSource`, `DatasetSource`, `ColumnarSource`); use `tfrecord`,
        `parquet`, `columnar` or `wrap` to make one.
      schema: Features, tables and labels.
      multi_hot_format: ``dense`` (``[B, max_len]`` ids + weights, for GPU/CPU lookups
        and XLA), ``sparse`` or ``ragged`` (same ids without padding, for TPU host
        enqueue).
      shuffle_files: Shuffle the file order every epoch (seeded by
        ``PipelineConfig.shuffle_seed``).
      layout: ``per_feature`` (``{"dense": {name: ...}, "ids": {...}, "weights":
        {...}}``, one tensor per feature) or ``packed`` (one float32 ``dense``, one int32
        ``ids`` and one float32 ``weights`` tensor, ``[B, n]`` each; see
        `tfinput.layout`). Packed batches cost one host-to-device transfer per group
        instead of one per feature (benchmarks/RESULTS.md, "Host to device"), at the
        price of a concat in the parse map and a
        slice (`tfinput.layout.unpack`) in the model. ``PipelineConfig.layout``, when
        set, overrides it.
      service: Read through tf.data service (`with_service`, a
        `tfinput.service.ServiceRead`), or None (this process reads).
      towers: Emit two-tower retrieval batches (`with_towers`): ``({"query":
        {"dense", "ids", "weights"}, "candidate": {...}}, labels)``.
    """

    source: Source
    schema: Schema
    multi_hot_format: str = "dense"
    shuffle_files: bool = False
    layout: str = "per_feature"
    service: ServiceRead | None = None
    towers: bool = False

    def __post_init__(self) -> None:
        if self.multi_hot_format not in MULTI_HOT_FORMATS:
            raise ConfigError(
                f"multi_hot_format: expected one of {list(MULTI_HOT_FORMATS)}, "
                f"got {self.multi_hot_format!r}"
            )
        if not isinstance(self.schema, Schema):
            raise ConfigError(
                f"schema: expected a tfinput.Schema, got {type(self.schema).__name__}"
            )
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout: expected one of {list(LAYOUTS)}, got {self.layout!r}")
        if self.towers:
            check_towers(self.schema, self.layout)

    # ------------------------------------------------------------ builders
    def with_multi_hot_format(self, fmt: str) -> Pipeline:
        """Emit multi-hot features as ``dense``, ``sparse`` or ``ragged`` tensors."""
        return dataclasses.replace(self, multi_hot_format=fmt)

    def with_file_shuffling(self, enabled: bool = True) -> Pipeline:
        """Shuffle the order of files every epoch."""
        return dataclasses.replace(self, shuffle_files=enabled)

    def with_schema(self, schema: Schema) -> Pipeline:
        return dataclasses.replace(self, schema=schema)

    def with_layout(self, name: str) -> Pipeline:
        """Emit batches in the ``per_feature`` or ``packed`` layout (see ``layout``).

        Raises:
          ConfigError: ``name`` is not one of `tfinput.config.LAYOUTS`.
        """
        return dataclasses.replace(self, layout=name)

    def with_towers(self, enabled: bool = True) -> Pipeline:
        """Emit two-tower retrieval batches: ``({"query": q, "candidate": c}, labels)``
        where ``q`` and ``c`` are per-feature groups (``{"dense", "ids", "weights"}``)
        of the features the schema marks ``tower="query"`` / ``tower="candidate"``.

        Only tower-marked features are read and emitted (features with ``tower``
        None are left out, as if not in the schema); the labels come as usual (a
        retrieval model with in-batch negatives may ignore them). The split happens
        inside the one parse map, on the transforms' outputs: no extra pass. With
        ``PipelineConfig.drop_remainder`` every tensor has a static shape.

        Raises:
          ConfigError: the schema has no query or no candidate feature, or the
            ``packed`` layout is set (towers use the per-feature layout).
        """
        return dataclasses.replace(self, towers=enabled)

    def with_service(
        self,
        service: str | Fleet | None,
        *,
        workers: int | None = None,
        processing_mode: str = "dynamic",
        job_name: str | None = None,
        stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S,
    ) -> Pipeline:
        """Read the built pipeline through tf.data service (None: read it here).

        Args:
          service: A dispatcher address (``grpc://host:port``) or a fleet sized by
            ``PipelineConfig.service_workers``: a `tfinput.service.LocalFleet` (worker
            processes on this machine) or any object with ``max_workers`` and
            ``address_for(workers)`` (the `tfinput._src.core.service.Fleet` protocol).
          workers: How many workers the address has (for the tuner's workers-needed
            estimate).
          processing_mode: ``dynamic`` (each file to one worker) or ``off``; see
            `tfinput.service`.
          job_name: Share one job between consumers of the same name.
          stall_timeout_s: A read with no batch for this long raises (a worker died
            and none came back at its address: tf.data service alone waits forever).
            An epoch that ends with rows missing, beyond the workers' drop_remainder
            tails, logs a warning counting them. None: tf.data's own read, unguarded.

        Raises:
          ConfigError: ``service`` is neither an address nor a fleet, or a
            non-positive ``stall_timeout_s``.
        """
        if service is None:
            return dataclasses.replace(self, service=None)
        read = ServiceRead(
            service,
            workers=workers,
            processing_mode=processing_mode,
            job_name=job_name,
            stall_timeout_s=stall_timeout_s,
        )
        return dataclasses.replace(self, service=read)

    def packed_layout(self) -> PackedLayout:
        """Where each feature lives in a packed batch of this pipeline's schema (its
        `PackedLayout.to_dict` is the JSON description to store next to a model)."""
        return PackedLayout.from_schema(self.schema)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (recorded next to measurements)."""
        files = self.source.files()
        return {
            "source": self.source.kind,
            "files": len(files),
            "features": len(self.schema.features),
            "multi_hot": len(self.schema.multi_hot),
            "multi_hot_format": self.multi_hot_format,
            "layout": self.layout,
            **({"towers": True} if self.towers else {}),
            **({"service": self.service.describe()} if self.service is not None else {}),
        }

    # --------------------------------------------------------------- build
    def build(
        self,
        config: PipelineConfig | None = None,
        input_context: tf.distribute.InputContext | None = None,
        *,
        repeat: bool = False,
    ) -> tf.data.Dataset:
        """Build the `tf.data.Dataset` of ``(features, labels)`` batches.

        Args:
          config: Performance knobs; defaults to `PipelineConfig()` (AUTOTUNE).
          input_context: Given by ``strategy.distribute_datasets_from_function``. Files
            are sharded by input pipeline id (whole files; with fewer files than input
            pipelines every pipeline reads all files in one fixed order and keeps every
            n-th element, with a warning) and batches use the per-replica batch size.
          repeat: Repeat the epochs endlessly, inside the service stage when the
            pipeline reads through tf.data service (`with_service`), so that the
            epochs run as one job rather than a new job per epoch (``.repeat()`` on the
            result would start one per epoch). Bench and tune measure this way.

        Returns:
          A dataset whose elements have fully defined static shapes when
          ``config.drop_remainder`` is True.

        Raises:
          SourceError: no files.
          SchemaError: the files do not match the schema.
          ConfigError: the ``packed`` layout with a multi-hot format other than ``dense``,
            or with `with_towers`.
        """
        config = checked_config(config)
        # An iterator still alive at the interpreter's exit must not hold it up, whatever
        # Python functions the source calls (a wrapped generator's too).
        guard_exit()
        asked = config
        packed = self._packed_layout(config)
        request = self._request(config, input_context)
        config = request.config  # data sharding fixes the read order (see _request)
        source = self.source
        warn_unhonoured(source, request)
        ds, decode = source.batch(records(source, request), request)
        batches = None if repeat or self.service else source.batch_count(request)
        if batches is not None:
            # Keras's fit then knows its steps per epoch (no "ran out of data"), and a
            # pass of another length fails. Not on tf.data service workers: each runs
            # this graph over the part of the files it is handed.
            ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
        parallel = parallel_calls(config.map_parallelism)
        ds = ds.map(
            self._parse(decode, request, packed),
            num_parallel_calls=parallel,
            deterministic=deterministic_arg(config) if parallel else None,
            name="parse",  # names the stage in profiler traces (`tfinput inspect`)
        )
        if config.prefetch != 0:
            ds = ds.prefetch(config.prefetch)
        opts = pipeline_options(config, sharded=input_context is not None)
        if source.symbolic_checkpoint(request):
            opts.experimental_symbolic_checkpoint = True
        ds = ds.with_options(opts)
        if repeat:
            ds = ds.repeat()
        if self.service is not None:  # the workers run everything above
            one_pass = not repeat and request.data_shard is None and input_context is None
            return self.service.apply(
                ds,
                config,
                rows=functools.partial(epoch_rows, source, request.files) if one_pass else None,
                files=len(request.files),
                batch_size=request.batch_size,
            )
        if repeat:  # measuring (bench, tune): no position to save
            return ds
        # Its iterators carry what the pipeline is into tf.train.Checkpoint, which then
        # refuses to restore them into another pipeline (files, order, seed, schema...).
        from tfinput._src.core._resume_identity import identified, pipeline_identity

        return identified(ds, pipeline_identity(self, asked, input_context))

    def serial_probe(
        self, config: PipelineConfig | None = None
    ) -> tuple[tf.data.Dataset, float] | None:
        """The consumer side of ``build(config)`` alone: the same interleave, shuffle and
        batch stages, over records held in memory (`Source.read_in_memory`) and without
        parsing; `tfinput.bench.roofline` times it as the pipeline's serial stage.

        Returns:
          ``(endless dataset of encoded batches, elements crossing the consumer side
          per batch)``, or None where no thread hands records over: the source's
          elements are already batches (Parquet, columnar, wrapped datasets), or the
          config reads the files sequentially (``interleave_parallelism`` or
          ``interleave_cycle_length`` 1: the read and the consumer side are one thread,
          the roofline's ``full`` stage).
        """
        config = checked_config(config)
        if read_parallelism(config) == 1:
            return None
        source = self.source
        if not isinstance(source, RooflineStages):
            return None
        request = self._request(config, None)
        ds = source.read_in_memory(request)
        if ds is None:
            return None
        if config.shuffle_buffer and not source.batches_itself:
            ds = source.shuffle_records(ds, request)
        ds, _ = source.batch(ds, request)
        if config.prefetch != 0:
            ds = ds.prefetch(config.prefetch)
        return ds.with_options(pipeline_options(config, sharded=False)), source.consumer_elements(
            request
        )

    def _packed_layout(self, config: PipelineConfig) -> PackedLayout | None:
        """The packed layout the build emits, or None for ``per_feature``.

        Raises:
          ConfigError: ``packed`` with a multi-hot format other than ``dense``.
        """
        if (config.layout or self.layout) != "packed":
            return None
        if self.towers:
            check_towers(self.schema, "packed")
        if self.multi_hot_format != "dense":
            raise ConfigError(
                f'layout "packed" needs multi_hot_format "dense", got multi_hot_format '
                f"{self.multi_hot_format!r}; use the per_feature layout for sparse or "
                "ragged multi-hot features"
            )
        return self.packed_layout()

    def _request(self, config: PipelineConfig, input_context: Any) -> ReadRequest:
        """The source's files for this input pipeline (sharded, validated) and the
        per-replica batch size (`read_request`)."""
        return read_request(
            self.source,
            self._read_schema(),
            config,
            input_context,
            shuffle_files=self.shuffle_files,
        )

    def _read_schema(self) -> Schema:
        """The schema a build reads: with `with_towers`, the tower-marked features."""
        return self.schema.tower_schema() if self.towers else self.schema

    def _parse(self, decode: Decode, request: ReadRequest, packed: PackedLayout | None) -> Any:
        """The parse map's function: decode, transform and (packed layout) pack, or
        (`with_towers`) split the features by tower."""
        config = request.config
        static_batch = request.batch_size if config.drop_remainder else None
        schema, fmt = self._read_schema(), self.multi_hot_format
        if fmt == "dense":
            warn_large_padded_batches(schema, request.batch_size)

        # Traced as written: decode and the transforms hold no Python control flow on
        # tensor values (a tensor used as a bool would fail the build loudly). Autograph
        # conversion of the functions behind it costs seconds of CPU on the first build
        # in every process (a CLI command, a tf.data service worker) and buys nothing.
        @tf.autograph.experimental.do_not_convert
        def parse(encoded: Any) -> Any:
            # Packing is fused with the transforms, in the same map: no extra pass.
            out = transform_batch(
                decode(encoded), schema, batch_size=static_batch, multi_hot_format=fmt,
                layout=packed,
            )  # fmt: skip
            return split_towers(out, schema) if self.towers else out

        return parse

    # ------------------------------------------------------- diagnostics
    def check(
        self,
        *,
        batch_size: int = 1024,
        max_files: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> CheckReport:
        """Read every file to the end, through the full parse and transforms, and
        report each file: its records, and every problem with the file, the feature
        and the records it is in.

        The files are read together, in order, through one pipeline: thousands of
        small files cost about what their rows cost, not a pipeline each. The source
        counts each file's records first (TFRecord: natively, in one pass that also
        samples each file's first records for the checks a build over it alone
        makes); a file it cannot count, or with a problem found while reading, is
        read alone, so its problems are reported as a check of that file alone
        reports them. `iterate` runs the same check when a pipeline fails, up to the
        first file with a problem, to name the culprit file.
        A file with a problem is read again once per feature and label (and its
        records counted), so that every failing feature is named, each with the
        records it was found in. Problems between files (Parquet column types that
        differ) are reported on the file that differs from the first.

        Args:
          batch_size: Records per batch while checking; errors name the batch's first
            record index.
          max_files: Stop after this many files (None: all).
          progress: Called as ``progress(files_checked, files)`` as files are checked
            (files read together count as they are passed).
        """
        return check_files(self, batch_size=batch_size, max_files=max_files, progress=progress)

    def iterate(
        self, config: PipelineConfig | None = None, *, diagnose: bool = True
    ) -> Iterator[Any]:
        """Iterate the built dataset, turning TensorFlow errors into `DataError`s that
        name the file (found by `check`) as well as the feature."""
        versions = file_versions(self.source) if diagnose else ()
        it = iter(self.build(config))
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except tf.errors.OpError as e:
                error = without_locals(e)
                break
            yield batch
        del it  # the failed iterator goes now, before the checks that name the file
        raise explain_failure(self, error, diagnose=diagnose, versions=versions) from error

    def iterator(
        self,
        config: PipelineConfig | None = None,
        *,
        input_context: tf.distribute.InputContext | None = None,
        epochs: int | None = 1,
        keep: int = 8,
    ) -> InputIterator:
        """Iterate the built dataset with a position that can be saved and restored
        exactly (`tfinput.resume.InputIterator`: ``get_state()`` / ``set_state()``).

        Args:
          config: As for `build`.
          input_context: As for `build`.
          epochs: Passes over the data (None: endless); the position counts across them.
          keep: Delivered batches kept so that ``get_state(unconsumed=n)`` can hand back
            what a consumer took but did not train on.

        Raises:
          As `build`; `ResumeError` for a pipeline read through tf.data service.
        """
        import random

        from tfinput._src.core._input_iterator import InputIterator, epoch_seed
        from tfinput._src.core._resume_identity import pipeline_identity

        if self.service is not None:
            raise ResumeError(
                "a pipeline read through tf.data service has no position to save (the "
                "workers hold it); checkpoint a local pipeline, or use the service's "
                "fault-tolerant dispatcher (with_service(None) reads here)"
            )
        config = checked_config(config)
        if epochs is not None and (not isinstance(epochs, int) or epochs < 1):
            raise ConfigError(f"epochs must be an integer >= 1 or None, got {epochs!r}")
        identity = pipeline_identity(self, config, input_context)
        identity["epochs"] = epochs
        # Each pass a fresh build whose seed comes from the state (see InputIterator):
        # a None seed is drawn once here and saved with the position.
        seed = config.shuffle_seed
        if seed is None:
            seed = random.SystemRandom().getrandbits(62)

        def epoch_dataset(epoch: int, base: int) -> tf.data.Dataset:
            seeded = dataclasses.replace(config, shuffle_seed=epoch_seed(base, epoch))
            return self.build(seeded, input_context)

        resume_dataset = None
        # The files' versions before any read: a failed read names a file that changed.
        versions = file_versions(self.source)
        first = dataclasses.replace(config, shuffle_seed=epoch_seed(seed, 0))
        request = self._request(first, input_context)
        restarts = self.source if isinstance(self.source, RestartsOrder) else None
        if (
            restarts is not None
            and request.data_shard is None
            and restarts.recomputes_order(request)
        ):
            # The order is a function of (seed, epoch, batch): states are three integers.
            def resume_dataset(epoch: int, base: int, batch: int) -> tf.data.Dataset:
                seeded = dataclasses.replace(config, shuffle_seed=epoch_seed(base, epoch))
                source = restarts.resume_at(iteration=0, batch=batch)
                return dataclasses.replace(self, source=source).build(seeded, input_context)

        return InputIterator(
            epoch_dataset(0, seed),
            identity=identity,
            name=self.source.kind,
            keep=keep,
            explain=lambda e: explain_failure(self, e, diagnose=True, versions=versions),
            epochs=epochs,
            epoch_dataset=epoch_dataset,
            seed=seed,
            resume_dataset=resume_dataset,
        )

    def explain(self, error: BaseException, *, diagnose: bool = True) -> DataError:
        """A `DataError` for a TensorFlow error raised while iterating this pipeline."""
        return explain_failure(self, error, diagnose=diagnose)


# ------------------------------------------------------------------ factories
def tfrecord(
    paths: PathsLike,
    schema: Schema,
    *,
    compression: str | None = "auto",
    empty_files: str = "skip",
    allow_absent: Sequence[str] = (),
) -> Pipeline:
    """A pipeline over TFRecord files of ``tf.train.Example``.

    Args:
      paths: A file, glob, directory, or a list of them.
      schema: The schema.
      compression: ``None``, ``"GZIP"``, ``"ZLIB"`` or ``"auto"`` (by extension).
      empty_files: ``skip`` (logged) or ``error``.
      allow_absent: Keys that may be absent from all of the first records checked at
        build (very sparse features); any other schema key absent from all of them is
        a `SchemaError` (see `TFRecordSource.validate`).
    """
    return Pipeline(
        source=TFRecordSource(
            paths=as_paths(paths),
            compression=compression,
            empty_files=empty_files,
            allow_absent=tuple(allow_absent),
        ),
        schema=schema,
    )


def parquet(
    paths: PathsLike, schema: Schema, *, engine: str = "pyarrow", empty_files: str = "skip"
) -> Pipeline:
    """A pipeline over Parquet files (pyarrow by default; see `ParquetSource`)."""
    return Pipeline(
        source=ParquetSource(paths=as_paths(paths), engine=engine, empty_files=empty_files),
        schema=schema,
    )


def columnar(
    paths: PathsLike,
    schema: Schema | None = None,
    *,
    verify: bool = True,
    shuffle_rows: bool = False,
    buffer_size: int | None = None,
    shuffle: str = "buffer",
) -> Pipeline:
    """A pipeline over columnar pre-batched records (`tfinput.columnar_records`: a
    directory, its ``manifest.json`` or data files) read with ``schema``, by default the
    manifest's; the keywords are `ColumnarSource`'s. A manifest that is missing or of
    another format version is a `SourceError`."""
    source = ColumnarSource(
        paths=as_paths(paths),
        verify=verify,
        shuffle_rows=shuffle_rows,
        buffer_size=buffer_size,
        shuffle=shuffle,
    )
    return Pipeline(source=source, schema=source.manifest().schema if schema is None else schema)


def wrap(
    dataset: tf.data.Dataset, schema: Schema, *, batched: bool = False, rebatch: bool = False
) -> Pipeline:
    """Wrap a user's own ``tf.data.Dataset`` of feature dicts or ``(features, labels)``
    pairs; ``batched`` when its elements are batches, ``rebatch`` to re-cut those to the
    config's batch size (see `DatasetSource`)."""
    return Pipeline(
        source=DatasetSource(dataset=dataset, batched=batched, rebatch=rebatch), schema=schema
    )
