"""`Pipeline`: an immutable pipeline definition that builds with any `PipelineConfig`.

    import tfinput
    schema = tfinput.Schema.from_json("schema.json")
    pipeline = tfinput.tfrecord("data/train-*.tfrecord", schema)
    ds = pipeline.build(tfinput.PipelineConfig(batch_size=4096, map_parallelism=3))

The built dataset has the layout tf.data's performance guide recommends, the same
skeleton for every source (`tfinput.sources.Source` supplies the steps that differ)::

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
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfinput._service_read import DEFAULT_STALL_TIMEOUT_S, ServiceRead
from tfinput.config import AUTOTUNE, LAYOUTS, PipelineConfig
from tfinput.errors import (
    ConfigError,
    DataError,
    ResumeError,
    TfinputError,
    clean_error,
    raised_inside,
    without_locals,
)
from tfinput.layout import PackedLayout, is_packed
from tfinput.schema import Schema
from tfinput.sources import DatasetSource, ParquetSource, TFRecordSource
from tfinput.sources.files import PathsLike, as_paths, epoch_rows
from tfinput.sources.protocol import Decode, ReadRequest, RestartsOrder, Source
from tfinput.sources.skeleton import (
    deterministic_arg,
    parallel_calls,
    plan_shards,
    read_parallelism,
    warn_unhonoured,
)
from tfinput.transforms import MULTI_HOT_FORMATS, transform_batch

if TYPE_CHECKING:  # pragma: no cover
    from tfinput.resume import InputIterator

__all__ = ["Pipeline", "tfrecord", "parquet", "wrap", "build_repeated", "FileCheck", "CheckReport"]
log = logging.getLogger("tfinput")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileCheck:
    """Result of reading one file completely with `Pipeline.check`.

    Attributes:
      path: The file (``<dataset>`` for a wrapped dataset).
      records: Records in the file: all of them when it reads cleanly; for a file with
        a problem, all of them when the source can count them, else those read before
        the first error.
      error: None, or every problem found, one per failing feature, joined by ``"; "``;
        each starts with the record (``record 60``) or the batch's records
        (``records 0-39``) where it was found.
      folded: Per int64 feature with ``out_of_range="modulo"`` whose ids in the file
        are not all in its table: ``{"ids": ids outside [0, vocabulary_size), of
        which "negative", "largest": the largest id read, "vocabulary_size"}``. The
        pipeline folds these ids onto others (floor modulo), as the schema asks.
    """

    path: str
    records: int
    error: str | None = None
    folded: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckReport:
    """What `Pipeline.check` found, file by file."""

    files: tuple[FileCheck, ...]
    empty_files: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(f.error is None for f in self.files)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def problems(self) -> tuple[FileCheck, ...]:
        return tuple(f for f in self.files if f.error is not None)

    @property
    def folded(self) -> dict[str, dict[str, int]]:
        """`FileCheck.folded` summed over the files (the largest id: the largest of
        all), by feature in schema order."""
        out: dict[str, dict[str, int]] = {}
        for f in self.files:
            for name, c in f.folded.items():
                total = out.setdefault(name, {**c, "ids": 0, "negative": 0})
                total["ids"] += c["ids"]
                total["negative"] += c["negative"]
                total["largest"] = max(total["largest"], c["largest"])
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A pipeline definition: a source, a schema and output options.

    Attributes:
      source: Where records come from: any `tfinput.sources.Source` (`TFRecordSource`,
        `ParquetSource`, `DatasetSource`, `ColumnarSource`); use `tfrecord`,
        `parquet`, `wrap` or `tfinput.columnar` to make one.
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
        `tfinput.fleet.ServiceRead`), or None (this process reads).
      towers: Emit two-tower retrieval batches (`with_towers`): ``({"query":
        {"dense", "ids", "weights"}, "candidate": {...}}, labels)``.
    """

    source: Source
    schema: Schema
    multi_hot_format: str = "dense"
    shuffle_files: bool = False
    layout: str = "per_feature"
    service: Any = None
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
            _check_towers(self.schema, self.layout)

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
        service: Any,
        *,
        workers: int | None = None,
        processing_mode: str = "dynamic",
        job_name: str | None = None,
        stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S,
    ) -> Pipeline:
        """Read the built pipeline through tf.data service (None: read it here).

        Args:
          service: A dispatcher address (``grpc://host:port``) or a fleet sized by
            ``PipelineConfig.service_workers``: a `tfinput.fleet.LocalFleet` (worker
            processes on this machine) or any object with ``max_workers`` and
            ``address_for(workers)`` (the `tfinput._service_read.Fleet` protocol).
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
        config = _checked_config(config)
        asked = config
        packed = self._packed_layout(config)
        request = self._request(config, input_context)
        config = request.config  # data sharding fixes the read order (see _request)
        source = self.source
        warn_unhonoured(source, request)
        ds = source.read(request)  # shuffle files, interleave (or batches, see below)
        if request.data_shard is not None:  # fewer files than input pipelines
            ds = ds.shard(*request.data_shard)
        if config.cache:
            ds = ds.cache()
        if config.shuffle_buffer and not source.batches_itself:
            ds = ds.shuffle(source.shuffle_buffer(ds, request), seed=config.shuffle_seed)
        ds, decode = source.batch(ds, request)
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
        opts = _options(config, sharded=input_context is not None)
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
        from tfinput.resume import identified, pipeline_identity

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
        config = _checked_config(config)
        if read_parallelism(config) == 1:
            return None
        request = self._request(config, None)
        source = self.source
        ds = source.read_in_memory(request)
        if ds is None:
            return None
        if config.shuffle_buffer and not source.batches_itself:
            ds = ds.shuffle(source.shuffle_buffer(ds, request), seed=config.shuffle_seed)
        ds, _ = source.batch(ds, request)
        if config.prefetch != 0:
            ds = ds.prefetch(config.prefetch)
        return ds.with_options(_options(config, sharded=False)), source.consumer_elements(request)

    def _packed_layout(self, config: PipelineConfig) -> PackedLayout | None:
        """The packed layout the build emits, or None for ``per_feature``.

        Raises:
          ConfigError: ``packed`` with a multi-hot format other than ``dense``.
        """
        if (config.layout or self.layout) != "packed":
            return None
        if self.towers:
            _check_towers(self.schema, "packed")
        if self.multi_hot_format != "dense":
            raise ConfigError(
                f'layout "packed" needs multi_hot_format "dense", got multi_hot_format '
                f"{self.multi_hot_format!r}; use the per_feature layout for sparse or "
                "ragged multi-hot features"
            )
        return self.packed_layout()

    def _request(self, config: PipelineConfig, input_context: Any) -> ReadRequest:
        """The source's files for this input pipeline (sharded, validated) and the
        per-replica batch size."""
        batch_size = config.batch_size
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(config.batch_size)
        files, data_shard = plan_shards(self.source.files(), input_context, self.source.kind)
        if data_shard is not None:
            # Every pipeline must read the files in one order for `shard` to split them:
            # a deterministic read, and the same file-shuffle seed on every host.
            seed = config.shuffle_seed
            if seed is None and self.shuffle_files:
                seed = 0
            config = dataclasses.replace(config, deterministic=True, shuffle_seed=seed)
        schema = self._read_schema()
        self.source.validate(files, schema)
        return ReadRequest(
            files=files,
            schema=schema,
            config=config,
            batch_size=batch_size,
            shuffle_files=self.shuffle_files,
            input_context=input_context,
            data_shard=data_shard,
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
            _warn_large_padded_batches(schema, request.batch_size)

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
            return _split_towers(out, schema) if self.towers else out

        return parse

    # ------------------------------------------------------- diagnostics
    def check(self, *, batch_size: int = 1024, max_files: int | None = None) -> CheckReport:
        """Read every file alone, to the end, through the full parse and transforms.

        Slow (one file at a time) but exact: a problem is reported with the file it is
        in. `iterate` calls this when a pipeline fails, to name the culprit file.
        A file with a problem is read again once per feature and label (and its
        records counted), so that every failing feature is named, each with the
        records it was found in; files that read cleanly are read once. Problems
        between files (Parquet column types that differ) are reported on the file
        that differs from the first.

        Args:
          batch_size: Records per batch while checking; errors name the batch's first
            record index.
          max_files: Stop after this many files (None: all).
        """
        files, empty = self.source.check_files()
        if not files and not empty:  # a source without files: read it whole
            return CheckReport(files=(self._check_one(None, batch_size),))
        across = {}
        if len(files) > 1:
            across = self.source.problems_across_files(files, self.schema)
        results = []
        for path in files[:max_files]:
            result = self._check_one(path, batch_size)
            if result.error is None and path in across:
                result = dataclasses.replace(result, error=across[path])
            if result.error is None:
                result = dataclasses.replace(result, folded=self._folded_ids(path, batch_size))
            results.append(result)
        return CheckReport(files=tuple(results), empty_files=tuple(empty))

    def _folded_ids(self, path: str, batch_size: int) -> dict[str, dict[str, int]]:
        """`FileCheck.folded` of one file: its raw ids (decoded, before the transforms
        fold them) of the int64 features with ``out_of_range="modulo"``, counted."""
        feats = [
            f for f in self.schema.categorical if f.dtype == "int64" and f.out_of_range == "modulo"
        ]
        if not feats:
            return {}
        vocab = {t.name: t.vocabulary_size for t in self.schema.tables}
        one = dataclasses.replace(
            self, service=None, towers=False, source=self.source.one_file(path)
        ).with_schema(
            Schema(
                features=tuple(feats),
                tables=tuple(t for t in self.schema.tables if t.name in {f.table for f in feats}),
            )
        )
        config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
        request = one._request(config, None)
        ds, decode = one.source.batch(one.source.read(request), request)
        lowest = tf.constant([-(2**63)], tf.int64)

        @tf.autograph.experimental.do_not_convert
        def count(encoded: Any) -> dict[str, tf.Tensor]:
            raw = decode(encoded)
            out = {}
            for f in feats:
                v = raw[f.source]
                v = v.flat_values if isinstance(v, tf.RaggedTensor) else v
                v = v.values if isinstance(v, tf.SparseTensor) else v
                v = tf.reshape(tf.cast(v, tf.int64), [-1])
                outside = tf.logical_or(v < 0, v >= vocab[f.table])
                out[f.name] = tf.stack(
                    [
                        tf.reduce_sum(tf.cast(outside, tf.int64)),
                        tf.reduce_sum(tf.cast(v < 0, tf.int64)),
                        tf.reduce_max(tf.concat([v, lowest], 0)),
                    ]
                )
            return out

        totals = {f.name: [0, 0, -(2**63)] for f in feats}
        for batch in ds.map(count).as_numpy_iterator():
            for name, (outside, negative, largest) in batch.items():
                t = totals[name]
                t[0], t[1], t[2] = (
                    t[0] + int(outside),
                    t[1] + int(negative),
                    max(t[2], int(largest)),
                )
        return {
            f.name: {
                "ids": totals[f.name][0],
                "negative": totals[f.name][1],
                "largest": totals[f.name][2],
                "vocabulary_size": vocab[f.table],
            }
            for f in feats
            if totals[f.name][0]
        }

    def _check_one(self, path: str | None, batch_size: int) -> FileCheck:
        """Read one file; on a problem, read it again once per feature and label so
        that every failing feature is named (in schema order, whatever order the
        checks ran in), each with the records it was found in."""
        # Checks read here, file by file, every feature (towers or not).
        one = dataclasses.replace(self, service=None, towers=False)
        if path is not None:
            one = dataclasses.replace(one, source=self.source.one_file(path))
        records, error = one._read_all(path, batch_size)
        if error is None:
            return FileCheck(path=path or "<dataset>", records=records)
        total = self.source.count_records(path) if path is not None else None
        messages: list[str] = []
        schema = self.schema
        if len(schema.features) + len(schema.labels) > 1:
            clean = None
            subsets = []
            for f in schema.features:
                _, sub = one._alone(f)._read_all(path, batch_size)
                clean = clean or (f if sub is None else None)
                subsets.append(sub)
            for lab in schema.labels if clean is not None else ():
                subsets.append(one._alone(clean, (lab,))._read_all(path, batch_size)[1])
            for sub in subsets:
                text = None if sub is None else _where(sub, batch_size, total)
                if text is not None and text not in messages:
                    messages.append(text)
        return FileCheck(
            path=path or "<dataset>",
            records=total if total is not None else records,
            error="; ".join(messages) if messages else _where(error, batch_size, total),
        )

    def _alone(self, feature: Any, labels: tuple = ()) -> Pipeline:
        """This pipeline with one feature (and the given labels) only."""
        name = getattr(feature, "table", None)
        tables = tuple(t for t in self.schema.tables if t.name == name)
        return self.with_schema(Schema(features=(feature,), tables=tables, labels=labels))

    def _read_all(self, path: str | None, batch_size: int) -> tuple[int, Any]:
        """``(records, None)``, or ``(records read before the error, problem)`` where
        the problem goes through `_where` to become a message."""
        config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
        records = 0
        try:
            for features, _ in self.build(config):
                records += int(_batch_rows(features))
        except (tf.errors.OpError, TfinputError) as e:
            message = explained = clean_error(e)
            if path is not None and message.startswith(path + ": "):
                message = explained = message[len(path) + 2 :]  # FileCheck names the path
            if path is not None:  # e.g. name the columnar chunk
                explained = self.source.explain_error(path, message)
            ours = isinstance(e, TfinputError) or explained != message or raised_inside(e)
            return records, (records, explained, ours)
        return records, None

    def iterate(
        self, config: PipelineConfig | None = None, *, diagnose: bool = True
    ) -> Iterator[Any]:
        """Iterate the built dataset, turning TensorFlow errors into `DataError`s that
        name the file (found by `check`) as well as the feature."""
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
        raise self.explain(error, diagnose=diagnose) from error

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

        from tfinput.resume import InputIterator, epoch_seed, pipeline_identity

        if self.service is not None:
            raise ResumeError(
                "a pipeline read through tf.data service has no position to save (the "
                "workers hold it); checkpoint a local pipeline, or use the service's "
                "fault-tolerant dispatcher (with_service(None) reads here)"
            )
        config = _checked_config(config)
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
            explain=lambda e: self.explain(e, diagnose=True),
            epochs=epochs,
            epoch_dataset=epoch_dataset,
            seed=seed,
            resume_dataset=resume_dataset,
        )

    def explain(self, error: BaseException, *, diagnose: bool = True) -> DataError:
        """A `DataError` for a TensorFlow error raised while iterating this pipeline."""
        message = clean_error(error)
        if diagnose:
            report = self.check()
            if report.problems:
                first = report.problems[0]
                return DataError(f"{first.path}: {first.error}")
        return DataError(message)


def _check_towers(schema: Schema, layout: str) -> None:
    """Raise `ConfigError` unless ``schema`` marks both towers and ``layout`` is
    per-feature."""
    missing = [side for side in ("query", "candidate") if not schema.tower(side)]
    if missing:
        raise ConfigError(
            f"with_towers: the schema marks no {' and no '.join(missing)} feature; set "
            'tower="query" / tower="candidate" on its features (Schema.with_towers, or '
            '"tower" in the schema JSON)'
        )
    if layout == "packed":
        raise ConfigError(
            "with_towers: the packed layout is not supported with towers; use the "
            'per_feature layout (leave PipelineConfig.layout None or "per_feature")'
        )


def _split_towers(out: tuple[Any, Any], schema: Schema) -> tuple[Any, Any]:
    """``(features, labels)`` of `transform_batch` split into ``{"query": ...,
    "candidate": ...}``, each with the ``dense``/``ids``/``weights`` groups."""
    features, labels = out
    towers: dict[str, Any] = {}
    for side in ("query", "candidate"):
        names = {f.name for f in schema.tower(side)}
        towers[side] = {
            group: {n: v for n, v in values.items() if n in names}
            for group, values in features.items()
        }
    return towers, labels


def _checked_config(config: PipelineConfig | None) -> PipelineConfig:
    """``config``, or the default `PipelineConfig()` for None.

    Raises:
      ConfigError: not a `PipelineConfig`.
    """
    config = config or PipelineConfig()
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"config: expected a PipelineConfig, got {type(config).__name__}")
    return config


#: One padded dense multi-hot batch above this many bytes is logged at build.
LARGE_BATCH_BYTES = 256 * 2**20


def _warn_large_padded_batches(schema: Schema, batch_size: int) -> None:
    """The dense format pads every list to ``max_len``: ``batch * max_len`` int32 ids
    plus float32 weights per feature, whatever the real list lengths."""
    for f in schema.multi_hot:
        size = 8 * batch_size * f.max_len
        if size > LARGE_BATCH_BYTES:
            log.warning(
                "tfinput: feature %r: max_len %d pads each batch of %d to %.0f MiB of ids "
                "and weights; lower max_len (most lists are shorter?) or use "
                'with_multi_hot_format("ragged"/"sparse")',
                f.name,
                f.max_len,
                batch_size,
                size / 2**20,
            )


def _where(problem: tuple[int, str, bool], batch_size: int, total: int | None) -> str:
    """A problem's message, starting with the record (parse errors give the index in
    the batch) or the batch's records, which stop at the file's last record."""
    records, message, ours = problem
    parse = re.match(r"Key: (\S+?), Index: (\d+)\.\s*(.*)", message)
    if parse:
        key, index, rest = parse.groups()
        return f"record {records + int(index)}: key {key!r}: {rest}"
    if ours or re.match(r"(corrupted|truncated) record at byte ", message):
        return message  # precise already (a damaged record is named by its byte offset)
    last = records + batch_size - 1
    if total is not None and records < total:
        last = min(last, total - 1)
    return f"{'record' if last == records else 'records'} {records}" + (
        f"-{last}: {message}" if last != records else f": {message}"
    )


def _batch_rows(features: dict[str, Any]) -> int:
    if is_packed(features):
        return int(next(iter(features.values())).shape[0])
    for group in features.values():
        for value in group.values():
            if isinstance(value, tf.SparseTensor):
                return int(value.dense_shape[0])
            if isinstance(value, tf.RaggedTensor):
                return int(value.nrows())
            return int(value.shape[0])
    return 0


def _options(config: PipelineConfig, *, sharded: bool) -> tf.data.Options:
    opts = tf.data.Options()
    if config.private_threadpool_size != AUTOTUNE:
        opts.threading.private_threadpool_size = config.private_threadpool_size
    if config.max_intra_op_parallelism != AUTOTUNE:
        opts.threading.max_intra_op_parallelism = config.max_intra_op_parallelism
    if config.deterministic is not AUTOTUNE:
        opts.deterministic = bool(config.deterministic)
    if config.autotune_ram_budget != AUTOTUNE:
        opts.autotune.ram_budget = config.autotune_ram_budget
    if sharded:
        # tfinput shards files itself; stop tf.distribute from sharding again.
        opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return opts


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


def build_repeated(target: Any, config: PipelineConfig) -> tf.data.Dataset:
    """``target.build(config)`` repeated endlessly: inside the service stage for a
    `Pipeline` (`Pipeline.build` ``repeat=True``: one service job, not one per epoch),
    ``.repeat()`` for any other object with a ``build(config)``."""
    if isinstance(target, Pipeline):
        return target.build(config, repeat=True)
    return target.build(config).repeat()


def wrap(dataset: Any, schema: Schema, *, batched: bool = False, rebatch: bool = False) -> Pipeline:
    """Wrap a user's own ``tf.data.Dataset`` of feature dicts or ``(features, labels)``
    pairs; ``batched`` when its elements are batches, ``rebatch`` to re-cut those to the
    config's batch size (see `DatasetSource`)."""
    return Pipeline(
        source=DatasetSource(dataset=dataset, batched=batched, rebatch=rebatch), schema=schema
    )
