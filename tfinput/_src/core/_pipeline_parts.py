"""Pieces of `tfinput.Pipeline` kept beside its module: what `Pipeline.build` assembles
(the tf.data options of a config, the two-tower split and its checks, the warning for
very large padded batches), and `Pipeline.check`: every file read alone, to the end,
through the full parse and transforms, each problem named with its file, feature and
records (`FileCheck`, `CheckReport`). `tfinput.pipeline` is the public API."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import tensorflow as tf

from tfinput._src.core.config import AUTOTUNE, PipelineConfig
from tfinput._src.core.errors import (
    ConfigError,
    DataError,
    TfinputError,
    clean_error,
    raised_inside,
)
from tfinput._src.core.layout import is_packed
from tfinput._src.core.schema import Categorical, Feature, MultiHot, Schema
from tfinput._src.core.sources.protocol import FileChecks

if TYPE_CHECKING:
    from tfinput._src.core.sources.protocol import Source

__all__ = [
    "CheckReport",
    "FileCheck",
    "check_files",
    "check_towers",
    "checked_config",
    "explain_failure",
    "has_min_parallelism",
    "pipeline_options",
    "split_towers",
    "warn_large_padded_batches",
]

log = logging.getLogger("tfinput")


def check_towers(schema: Schema, layout: str) -> None:
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


def split_towers(out: tuple[Any, Any], schema: Schema) -> tuple[Any, Any]:
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


#: One padded dense multi-hot batch above this many bytes is logged at build.
LARGE_BATCH_BYTES = 256 * 2**20


def warn_large_padded_batches(schema: Schema, batch_size: int) -> None:
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


def has_min_parallelism() -> bool:
    """Whether this TensorFlow's tf.data has ``Options.autotune.min_parallelism``."""
    return hasattr(tf.data.Options().autotune, "min_parallelism")


def pipeline_options(config: PipelineConfig, *, sharded: bool) -> tf.data.Options:
    opts = tf.data.Options()
    if config.private_threadpool_size != AUTOTUNE:
        opts.threading.private_threadpool_size = config.private_threadpool_size
    if config.max_intra_op_parallelism != AUTOTUNE:
        opts.threading.max_intra_op_parallelism = config.max_intra_op_parallelism
    if config.deterministic is not AUTOTUNE:
        opts.deterministic = bool(config.deterministic)
    if config.autotune_ram_budget != AUTOTUNE:
        opts.autotune.ram_budget = config.autotune_ram_budget
    if config.autotune_min_parallelism != AUTOTUNE:
        if has_min_parallelism():
            opts.autotune.min_parallelism = config.autotune_min_parallelism
        else:
            log.warning(
                "tfinput: autotune_min_parallelism=%d ignored: TensorFlow %s has no "
                "tf.data Options.autotune.min_parallelism (2.20 and later)",
                config.autotune_min_parallelism,
                tf.__version__,
            )
    if sharded:
        # tfinput shards files itself; stop tf.distribute from sharding again.
        opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return opts


def checked_config(config: PipelineConfig | None) -> PipelineConfig:
    """``config``, or the default `PipelineConfig()` for None.

    Raises:
      ConfigError: not a `PipelineConfig`.
    """
    config = config or PipelineConfig()
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"config: expected a PipelineConfig, got {type(config).__name__}")
    return config


# ----------------------------------------------------------- Pipeline.check
class Pipeline(Protocol):
    """What the check reads of a `tfinput.Pipeline`: its schema and source, a build, and
    a copy with another schema (a protocol: `tfinput.pipeline` imports this module)."""

    @property
    def schema(self) -> Schema: ...

    @property
    def source(self) -> Source: ...

    def build(self, config: PipelineConfig | None = None) -> tf.data.Dataset: ...

    def with_schema(self, schema: Schema) -> Pipeline: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileCheck:
    """Result of reading one file completely with `Pipeline.check`.

    Attributes:
      path: The file (``<dataset>`` for a wrapped dataset).
      records: Records in the file: all of them when it reads cleanly; for a file with
        a problem, all of them when the source can count them; for a damaged or cut
        file, those that read whole before the damage (TFRecord); else those read
        before the first error.
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


def check_files(
    pipeline: Pipeline,
    *,
    batch_size: int = 1024,
    max_files: int | None = None,
    first_problem: bool = False,
) -> CheckReport:
    """`Pipeline.check` of ``pipeline`` (its docstring has the contract).

    ``first_problem``: stop at the first file with a problem and count no folded ids
    (what `Pipeline.explain` needs to name the file of an error: the same first
    problem, without reading the files after it, or the clean ones twice)."""
    source = pipeline.source
    if not isinstance(source, FileChecks):  # a source without files: read it whole
        return CheckReport(files=(_check_one(pipeline, None, batch_size),))
    files, empty = source.check_files()
    across = {}
    if len(files) > 1:
        across = source.problems_across_files(files, pipeline.schema)
    results = []
    for path in files[:max_files]:
        result = _check_one(pipeline, path, batch_size)
        if result.error is None and path in across:
            result = dataclasses.replace(result, error=across[path])
        if result.error is None and not first_problem:
            result = dataclasses.replace(result, folded=_folded_ids(pipeline, path, batch_size))
        results.append(result)
        if first_problem and result.error is not None:
            break
    return CheckReport(files=tuple(results), empty_files=tuple(empty))


def explain_failure(pipeline: Pipeline, error: BaseException, *, diagnose: bool) -> DataError:
    """`Pipeline.explain`: the error's own message, or (``diagnose``) the first problem
    `check_files` finds, which names the file; a message that names one of the files
    already (a file that changed while it was read, a Parquet reader's error) is kept
    without reading the files again."""
    message = clean_error(error)
    if diagnose and not _names_a_file(pipeline, message):
        report = check_files(pipeline, first_problem=True)
        if report.problems:
            first = report.problems[0]
            return DataError(f"{first.path}: {first.error}")
    return DataError(message)


def _names_a_file(pipeline: Pipeline, message: str) -> bool:
    """Whether ``message`` starts with one of the pipeline's files (``PATH: ...``)."""
    source = pipeline.source
    if not isinstance(source, FileChecks) or ": " not in message:
        return False
    try:
        files = source.files()
    except (TfinputError, OSError):  # the files are not there any more: diagnose
        return False
    return message.partition(": ")[0] in files


def _file_checks(pipeline: Pipeline) -> FileChecks:
    """The pipeline's source, whose files are being checked one by one."""
    source = pipeline.source
    assert isinstance(source, FileChecks), "a file is checked only for a file source"
    return source


def _folded_ids(pipeline: Pipeline, path: str, batch_size: int) -> dict[str, dict[str, int]]:
    """`FileCheck.folded` of one file: its raw ids (decoded, before the transforms
    fold them) of the int64 features with ``out_of_range="modulo"``, counted."""
    feats = [
        f for f in pipeline.schema.categorical if f.dtype == "int64" and f.out_of_range == "modulo"
    ]
    if not feats:
        return {}
    vocab = {t.name: t.vocabulary_size for t in pipeline.schema.tables}
    one = dataclasses.replace(
        pipeline, service=None, towers=False, source=_file_checks(pipeline).one_file(path)
    ).with_schema(
        Schema(
            features=tuple(feats),
            tables=tuple(t for t in pipeline.schema.tables if t.name in {f.table for f in feats}),
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


def _check_one(pipeline: Pipeline, path: str | None, batch_size: int) -> FileCheck:
    """Read one file; on a problem, read it again once per feature and label so
    that every failing feature is named (in schema order, whatever order the
    checks ran in), each with the records it was found in; a damaged or cut file
    once (every feature stops at the same damage)."""
    # Checks read here, file by file, every feature (towers or not).
    one = dataclasses.replace(pipeline, service=None, towers=False)
    if path is not None:
        one = dataclasses.replace(one, source=_file_checks(pipeline).one_file(path))
    records, error = _read_all(one, path, batch_size)
    if error is None:
        return FileCheck(path=path or "<dataset>", records=records)
    total = None
    if path is not None:
        source = _file_checks(pipeline)
        total = source.count_records(path)
        if total is None:  # damaged or cut: the records before the damage
            total = source.count_readable(path)
    messages: list[str] = []
    schema = pipeline.schema
    if len(schema.features) + len(schema.labels) > 1 and not _damaged(error):
        clean = None
        subsets = []
        for f in schema.features:
            _, sub = _read_all(_alone(one, f), path, batch_size)
            clean = clean or (f if sub is None else None)
            subsets.append(sub)
        for lab in schema.labels if clean is not None else ():
            subsets.append(_read_all(_alone(one, clean, (lab,)), path, batch_size)[1])
        for sub in subsets:
            text = None if sub is None else _where(sub, batch_size, total)
            if text is not None and text not in messages:
                messages.append(text)
    return FileCheck(
        path=path or "<dataset>",
        records=total if total is not None else records,
        error="; ".join(messages) if messages else _where(error, batch_size, total),
    )


#: A damaged or cut file (TFRecord's framing, a columnar chunk's check or size): every
#: feature's read stops at the same record, so the file is not read again per feature.
_DAMAGE = re.compile(r"\b(corrupted|truncated) record\b|^truncated: ")


def _damaged(problem: tuple[int, str, bool]) -> bool:
    return _DAMAGE.search(problem[1]) is not None


def _alone(pipeline: Pipeline, feature: Feature, labels: tuple = ()) -> Pipeline:
    """This pipeline with one feature (and the given labels) only."""
    name = feature.table if isinstance(feature, (Categorical, MultiHot)) else None
    tables = tuple(t for t in pipeline.schema.tables if t.name == name)
    return pipeline.with_schema(Schema(features=(feature,), tables=tables, labels=labels))


def _read_all(pipeline: Pipeline, path: str | None, batch_size: int) -> tuple[int, Any]:
    """``(records, None)``, or ``(records read before the error, problem)`` where
    the problem goes through `_where` to become a message."""
    config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
    records = 0
    try:
        for features, _ in pipeline.build(config):
            records += int(_batch_rows(features))
    except (tf.errors.OpError, TfinputError) as e:
        message = explained = clean_error(e)
        if path is not None and message.startswith(path + ": "):
            message = explained = message[len(path) + 2 :]  # FileCheck names the path
        if path is not None:  # e.g. name the columnar chunk
            explained = _file_checks(pipeline).explain_error(path, message)
        ours = isinstance(e, TfinputError) or explained != message or raised_inside(e)
        return records, (records, explained, ours)
    return records, None


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
