"""`Pipeline.check`, kept beside `tfinput.Pipeline`'s module: every file read to the end
through the full parse and transforms (together, through one pipeline; a file with a
problem alone), each problem named with its file, feature and records (`FileCheck`,
`CheckReport`). `tfinput.pipeline` is the public API."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import tensorflow as tf

from tfinput._src.core._input_files import check_unchanged
from tfinput._src.core._python_calls import exiting
from tfinput._src.core.config import PipelineConfig
from tfinput._src.core.errors import (
    DataError,
    TfinputError,
    clean_error,
    raised_inside,
)
from tfinput._src.core.layout import is_packed
from tfinput._src.core.schema import Categorical, Feature, MultiHot, Schema
from tfinput._src.core.sources.protocol import FileChecks

if TYPE_CHECKING:
    from tfinput._src.core._pipeline_parts import FileVersions
    from tfinput._src.core.sources.protocol import Source

log = logging.getLogger("tfinput")


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
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """`Pipeline.check` of ``pipeline`` (its docstring has the contract).

    ``first_problem``: stop at the first file with a problem and count no folded ids
    (what `Pipeline.explain` needs to name the file of an error: the same first
    problem, without reading the files after it, or the clean ones twice)."""
    source = pipeline.source
    if not isinstance(source, FileChecks):  # a source without files: read it whole
        report = CheckReport(files=(_check_one(pipeline, None, batch_size),))
        if progress is not None:
            progress(1, 1)
        return report
    files, empty = source.check_files()
    across = {}
    if len(files) > 1:
        across = source.problems_across_files(files, pipeline.schema)
    files = files[:max_files]
    checks = _Checks(
        pipeline, source, batch_size=batch_size, first_problem=first_problem, progress=progress
    )
    results = checks.run(files, across, total=len(files))
    if not first_problem:
        results = _with_folded(pipeline, results, batch_size)
    return CheckReport(files=tuple(results), empty_files=tuple(empty))


#: Files counted, then read together, at a time (the progress moves on between).
_CHUNK_FILES = 4096
#: Rows a batch-of-one read may cover to find the file of an error among several
#: small files (in batches of ``batch_size``); beyond, those files are read alone.
_NARROW_BATCHES = 16


@dataclasses.dataclass(frozen=True)
class _Failed:
    """How a read of files together failed: at the build (``rows`` None), after
    ``rows`` rows, or with another count of rows than the files' (``error`` None).
    The error is kept as its message: the error itself would keep the failed
    iterator alive through its traceback."""

    rows: int | None
    error: str | None


class _Checks:
    """`check_files`' reading: the files whose records the source counts natively
    (`FileChecks.file_counts`) are read together, in order, through one pipeline, one
    pass for thousands of small files instead of a pipeline each; the others alone.
    A problem in a read together is located to its file (the rows read before it,
    the batch that failed, a batch-of-one read over the few files that batch covers),
    that file is read alone (`_check_one`: the message a check of it alone gives) and
    the read goes on after it. Anything it cannot locate is read alone, file by file,
    as before.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        source: FileChecks,
        *,
        batch_size: int,
        first_problem: bool,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.pipeline, self.source = pipeline, source
        # Checks read every feature (towers or not), locally.
        self.reading = dataclasses.replace(pipeline, service=None, towers=False)
        self.batch_size, self.first_problem, self.progress = batch_size, first_problem, progress
        self.results: list[FileCheck] = []
        self.total = self.reported = 0

    def run(self, files: list[str], across: Mapping[str, str], *, total: int) -> list[FileCheck]:
        """Every file's `FileCheck`, in order (up to the first problem with
        ``first_problem``); ``across``: problems between files, by file."""
        self.total = total
        self._report(0)
        for first in range(0, len(files), _CHUNK_FILES):
            chunk = files[first : first + _CHUNK_FILES]
            counts = self.source.file_counts(chunk, self.pipeline.schema)
            together: list[tuple[str, int]] = []
            for path, count in zip(chunk, counts):
                if count is not None and path not in across:
                    together.append((path, count))
                    continue
                if not self._together(together) or not self._alone(path, across.get(path)):
                    return self.results
                together = []
            if not self._together(together):
                return self.results
        return self.results

    # ------------------------------------------------------------- results
    def _report(self, done: int) -> None:
        if self.progress is not None and (done > self.reported or done == 0):
            self.reported = done
            self.progress(done, self.total)

    def _add(self, result: FileCheck) -> bool:
        """Keep ``result``; whether to go on (not after a problem with ``first_problem``)."""
        self.results.append(result)
        self._report(len(self.results))
        return not (self.first_problem and result.error is not None)

    def _alone(self, path: str, across: str | None = None) -> bool:
        """Read ``path`` alone (with ``across``: its problem between files, if it reads
        cleanly); whether to go on."""
        result = _check_one(self.pipeline, path, self.batch_size)
        if result.error is None and across is not None:
            result = dataclasses.replace(result, error=across)
        return self._add(result)

    def _clean(self, items: list[tuple[str, int]]) -> None:
        for path, count in items:
            self._add(FileCheck(path=path, records=count))

    # ------------------------------------------------------------- reading
    def _together(self, items: list[tuple[str, int]]) -> bool:
        """Check ``items`` (``(path, records)``), reading them together where they read
        cleanly; whether to go on."""
        work: list[list[tuple[str, int]] | str] = [items]  # a stack: the last goes next
        while work:
            job = work.pop()
            if isinstance(job, str):
                if not self._alone(job):
                    return False
                continue
            if not job:
                continue
            failed = self._read(job, self.batch_size)
            if failed is None:
                self._clean(job)
            elif failed.rows is None and failed.error is not None:  # at the build
                named = _named_file(failed.error, [p for p, _ in job])
                if named is None:
                    work.extend(reversed([p for p, _ in job]))
                else:  # read the files before it together, it alone, then the rest
                    work.extend([job[named + 1 :], job[named][0], job[:named]])
            elif failed.error is None:  # another count of rows: changed files?
                work.extend(reversed([p for p, _ in job]))
            else:
                clean, located, last = self._locate(job, failed.rows)
                if located is None:  # the files the failing batch covers, alone
                    self._clean(job[:clean])
                    work.append(job[last + 1 :])
                    work.extend(reversed([p for p, _ in job[clean : last + 1]]))
                else:
                    self._clean(job[:located])
                    work.extend([job[located + 1 :], job[located][0]])
            if self.first_problem and self.results and self.results[-1].error is not None:
                return False
        return True

    def _read(self, job: list[tuple[str, int]], batch_size: int) -> _Failed | None:
        """Read ``job``'s files together, in order, through the full parse and
        transforms; None when every row read cleanly."""
        paths = [p for p, _ in job]
        ends = list(itertools.accumulate(c for _, c in job))
        one = dataclasses.replace(self.reading, source=self.source.only_files(paths))
        config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
        try:
            batches = one.build(config)
        except (tf.errors.OpError, TfinputError) as e:
            return _Failed(rows=None, error=clean_error(e))
        rows = 0
        base = len(self.results)
        try:
            for features, _ in batches:
                rows += _batch_rows(features)
                self._report(base + bisect.bisect_right(ends, rows))
        except (tf.errors.OpError, TfinputError) as e:
            return _Failed(rows=rows, error=clean_error(e))
        return None if rows == ends[-1] else _Failed(rows=rows, error=None)

    def _locate(self, job: list[tuple[str, int]], rows: int) -> tuple[int, int | None, int]:
        """Where a read of ``job`` failed after ``rows`` rows: ``(clean, located,
        last)``: the files before ``clean`` were read whole in batches that passed;
        the failing batch covers files ``clean`` to ``last``; ``located`` is the first
        of them with a problem (the ones before it read cleanly), None if not found."""
        ends = list(itertools.accumulate(c for _, c in job))
        clean = bisect.bisect_right(ends, rows)
        if clean >= len(job):  # every row read, then an error: no file's own
            return 0, None, len(job) - 1
        last_row = min(rows + self.batch_size, ends[-1]) - 1
        last = min(bisect.bisect_right(ends, last_row), len(job) - 1)
        if clean == last:
            return clean, clean, last
        start = ends[clean - 1] if clean else 0
        if ends[last] - start > _NARROW_BATCHES * self.batch_size:
            return clean, None, last
        failed = self._read(job[clean : last + 1], 1)  # the failing row, exactly
        if failed is None or failed.rows is None or failed.error is None:
            return clean, None, last
        return clean, bisect.bisect_right(ends, start + failed.rows), last


def _named_file(message: str, paths: list[str]) -> int | None:
    """The index of the file among ``paths`` a build error's message names, or None."""
    for i, path in enumerate(paths):
        if message.startswith(f"{path}:") or f"{path!r}" in message or f"{path}: " in message:
            return i
    return None


def explain_failure(
    pipeline: Pipeline, error: BaseException, *, diagnose: bool, versions: FileVersions = ()
) -> DataError:
    """`Pipeline.explain`: the error's own message, or (``diagnose``) a file that is
    not the version ``versions`` had when the read started (a file cut while it was
    read can fail a read ahead inside a record that was there), else the first problem
    `check_files` finds, which names the file; a message that names one of the files
    already (a file that changed while it was read, a Parquet reader's error) is kept
    without reading the files again, as is any once the interpreter's exit has begun
    (nothing more is read then)."""
    message = clean_error(error)
    if diagnose and not exiting() and not _names_a_file(pipeline, message):
        for path, version in versions:
            try:
                check_unchanged(path, version)
            except DataError as changed:
                return changed
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


def _with_folded(pipeline: Pipeline, results: list[FileCheck], batch_size: int) -> list[FileCheck]:
    """``results`` with `FileCheck.folded` set on the files that read cleanly: counted
    in one pass over them all (row by row, each row's counts given to its file by the
    files' records), or file by file where that pass fails."""
    feats = [
        f for f in pipeline.schema.categorical if f.dtype == "int64" and f.out_of_range == "modulo"
    ]
    clean = [i for i, r in enumerate(results) if r.error is None]
    if not feats or not clean:
        return results
    paths = [results[i].path for i in clean]
    ends = list(itertools.accumulate(results[i].records for i in clean))
    try:
        folded = _count_folded(pipeline, feats, paths, ends, batch_size)
    except (tf.errors.OpError, TfinputError):
        folded = None
    if folded is None:  # file by file
        folded = [
            _count_folded(pipeline, feats, [path], [end - start], batch_size)[0]  # type: ignore[index]
            for path, start, end in zip(paths, [0, *ends[:-1]], ends)
        ]
    out = list(results)
    for i, counted in zip(clean, folded):
        out[i] = dataclasses.replace(results[i], folded=counted)
    return out


def _count_folded(
    pipeline: Pipeline, feats: list[Categorical], paths: list[str], ends: list[int], batch_size: int
) -> list[dict[str, dict[str, int]]] | None:
    """`FileCheck.folded` of each of ``paths`` (read together, in order; file ``i``
    holds the rows up to ``ends[i]``): their raw ids (decoded, before the transforms
    fold them) of the int64 features with ``out_of_range="modulo"``, counted row by
    row. None when several files do not give ``ends[-1]`` rows."""
    vocab = {t.name: t.vocabulary_size for t in pipeline.schema.tables}
    one = dataclasses.replace(
        pipeline, service=None, towers=False, source=_file_checks(pipeline).only_files(paths)
    ).with_schema(
        Schema(
            features=tuple(feats),
            tables=tuple(t for t in pipeline.schema.tables if t.name in {f.table for f in feats}),
        )
    )
    config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
    request = one._request(config, None)
    ds, decode = one.source.batch(one.source.read(request), request)

    @tf.autograph.experimental.do_not_convert
    def per_row(encoded: Any) -> dict[str, tf.Tensor]:
        raw = decode(encoded)
        out = {}
        for f in feats:
            values, rows, n = _values_by_row(raw[f.source])
            values = tf.cast(values, tf.int64)
            outside = tf.cast(tf.logical_or(values < 0, values >= vocab[f.table]), tf.int64)
            out[f.name] = tf.stack(
                [
                    tf.math.unsorted_segment_sum(outside, rows, n),
                    tf.math.unsorted_segment_sum(tf.cast(values < 0, tf.int64), rows, n),
                    tf.math.unsorted_segment_max(values, rows, n),  # no value: the lowest
                ]
            )
        return out

    bounds = np.asarray(ends, np.int64)
    totals = {f.name: np.zeros((3, len(paths)), np.int64) for f in feats}
    for total in totals.values():
        total[2] = np.iinfo(np.int64).min
    offset = 0
    for batch in ds.map(per_row).as_numpy_iterator():
        n = next(iter(batch.values())).shape[1]
        where = np.searchsorted(bounds, np.arange(offset, offset + n), side="right")
        where = np.minimum(where, len(paths) - 1)
        for name, (outside, negative, largest) in batch.items():
            t = totals[name]
            np.add.at(t[0], where, outside)
            np.add.at(t[1], where, negative)
            np.maximum.at(t[2], where, largest)
        offset += n
    if len(paths) > 1 and offset != ends[-1]:
        return None
    return [
        {
            f.name: {
                "ids": int(totals[f.name][0, i]),
                "negative": int(totals[f.name][1, i]),
                "largest": int(totals[f.name][2, i]),
                "vocabulary_size": vocab[f.table],
            }
            for f in feats
            if totals[f.name][0, i]
        }
        for i in range(len(paths))
    ]


def _values_by_row(v: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(values, row of each value, rows)`` of a decoded column: dense, ragged or
    sparse."""
    if isinstance(v, tf.RaggedTensor):
        v = v.merge_dims(1, -1) if v.ragged_rank > 1 else v
        return v.flat_values, v.value_rowids(), v.nrows()
    if isinstance(v, tf.SparseTensor):
        return v.values, v.indices[:, 0], v.dense_shape[0]
    n = tf.shape(v, out_type=tf.int64)[0]
    flat = tf.reshape(v, [n, -1])
    rows = tf.repeat(tf.range(n), tf.shape(flat, out_type=tf.int64)[1])
    return tf.reshape(flat, [-1]), rows, n


def _check_one(pipeline: Pipeline, path: str | None, batch_size: int) -> FileCheck:
    """Read one file; on a problem, read it again once per feature and label so
    that every failing feature is named (in schema order, whatever order the
    checks ran in), each with the records it was found in; a damaged or cut file
    once (every feature stops at the same damage)."""
    # Checks read here, file by file, every feature (towers or not).
    one = dataclasses.replace(pipeline, service=None, towers=False)
    if path is not None:
        one = dataclasses.replace(one, source=_file_checks(pipeline).only_files([path]))
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
