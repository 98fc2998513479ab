"""What a saved input state belongs to: the pipeline's identity (files, schema,
batch-shaping and read-plan knobs), its comparison with another build's, and the dataset
that carries it (`identified`). `tfinput.resume` is the public API."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tfinput._src.core.config import AUTOTUNE
from tfinput._src.core.errors import ResumeError

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig
    from tfinput._src.core.schema import Schema
    from tfinput._src.core.sources.protocol import Source


STATE_FORMAT = "tfinput.input-state/1"
#: A state of three integers (epoch, seed, batch) and the pipeline's digest: what a
#: source that recomputes its order from them (columnar ``shuffle="global"``) saves.
COMPACT_FORMAT = "tfinput.input-position/1"
#: Config fields that shape the batches: a state saved under other values is refused.
IDENTITY_KNOBS = ("batch_size", "drop_remainder", "shuffle_buffer", "shuffle_seed", "cache")
# The read plan (`_read_plan`): the read knobs where the source uses them
# (`Source.position_knobs`), compared by the plan they make (`_plan`), and ``prefetch``
# by whether there is a prefetch stage; a state saved under another plan is refused.

RESTORE_INTO = (
    "Restore it into a build of the same files, schema, batch-shaping and read-plan "
    "knobs (docs/resume.md lists those that may change)"
)
#: Said after a read-plan knob's difference.
_WHY = {
    "read_batch": "records per mini-batch of the TFRecord read; 0 and 1 are the same",
    "interleave_cycle_length": "files read at once; AUTOTUNE takes it from the host's "
    "cores and interleave_parallelism: set the saved number to resume",
    "interleave_block_length": "AUTOTUNE and 1 are the same",
    "interleave_parallelism": "a sequential read (1) and a parallel one keep different "
    "positions; parallel values may change",
    "prefetch": "0 has no prefetch stage; other values may change",
}
#: Keys an identity may lack (a pipeline without towers, one input pipeline, a
#: `tf.train.Checkpoint`'s identity without epochs); a saved identity that lacks any
#: other key the current one has was saved by an earlier tfinput.
_OPTIONAL = frozenset({"towers", "input_pipeline", "epochs", "files_digest"})
REMEDY = (
    "tf.data can checkpoint only native datasets: data read by Python code "
    "(Dataset.from_generator, py_function) has no position it can save. Convert the data "
    "to a native format (`tfinput convert DATA --to columnar --out DIR`, or --to "
    "tfrecord) or build the wrapped dataset from native tf.data ops"
)


class Identifiable(Protocol):
    """What a saved state's identity is made of (`tfinput.Pipeline` has it all)."""

    @property
    def source(self) -> Source: ...
    @property
    def schema(self) -> Schema: ...
    @property
    def layout(self) -> str: ...
    @property
    def multi_hot_format(self) -> str: ...
    @property
    def shuffle_files(self) -> bool: ...
    @property
    def towers(self) -> bool: ...


def pipeline_identity(
    pipeline: Identifiable,
    config: PipelineConfig,
    input_context: tf.distribute.InputContext | None = None,
) -> dict[str, object]:
    """What a state must match to be restored into a build: source kind, files (each
    local file by absolute path, size and modification time, so that the same files
    named from another working directory match and a file rewritten under its name
    does not), schema digest, layout, multi-hot format, the batch-shaping knobs, the
    read plan (the source's `Source.position_knobs` and `Source.position_fields`, and
    whether there is a prefetch stage) and the input pipeline (``input_context``).
    The other knobs may differ (a job restarted on another host may use its own tuned
    parallelism): a restore across them is exact."""
    source = pipeline.source
    schema = json.dumps(pipeline.schema.to_dict(), sort_keys=True)
    identity = {
        "source": source.kind,
        "files": _listed([_file_entry(path) for path in source.files()]),
        "schema_digest": hashlib.sha256(schema.encode()).hexdigest()[:16],
        "layout": config.layout or pipeline.layout,
        "multi_hot_format": pipeline.multi_hot_format,
        "shuffle_files": pipeline.shuffle_files,
    }
    identity.update({k: getattr(config, k) for k in IDENTITY_KNOBS})
    identity.update(_read_plan(source, config))
    identity.update(getattr(source, "position_fields", {}))
    shuffled = config.shuffle_buffer or pipeline.shuffle_files or pipeline.source.shuffles_itself
    if not shuffled:
        identity["shuffle_seed"] = None  # nothing is shuffled: the seed changes nothing
    if pipeline.towers:
        identity["towers"] = True
    if input_context is not None:
        identity["input_pipeline"] = [
            input_context.input_pipeline_id,
            input_context.num_input_pipelines,
        ]
    return identity


def _read_plan(source: Source, config: PipelineConfig) -> dict[str, object]:
    """The read-plan knobs of ``config`` that ``source`` holds a position to, as an
    identity records them: AUTOTUNE as ``"AUTOTUNE"``, the interleave's parallelism as
    the read uses it (at most the cycle length), and an AUTOTUNE cycle length with the
    number of files TensorFlow reads at once on this host (`_cycle_length`)."""
    # Imported here: the sources package loads TensorFlow, which `tfinput check`'s
    # parser (this module's importer) must not.
    from tfinput._src.core.sources.protocol import READ_KNOBS, read_parallelism

    knobs = getattr(source, "position_knobs", None)
    if knobs is None:  # a source written against an earlier Source protocol
        knobs = [k for k in READ_KNOBS if k not in getattr(source, "ignored_knobs", ())]
    out: dict[str, object] = {}
    for knob in [*knobs, "prefetch"]:
        value = (
            read_parallelism(config) if knob == "interleave_parallelism" else getattr(config, knob)
        )
        out[knob] = "AUTOTUNE" if value == AUTOTUNE else value
    if out.get("interleave_cycle_length") == "AUTOTUNE":
        cores = _cores()
        out["interleave_cycle_length"] = (
            f"AUTOTUNE ({_cycle_length(config, cores)} on {cores} cores)"
        )
    return out


def _cores() -> int:
    """The cores this process may run on, as TensorFlow counts them for AUTOTUNE."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover


def _cycle_length(config: PipelineConfig, cores: int) -> int:
    """The files TensorFlow's interleave reads at once for an AUTOTUNE
    ``interleave_cycle_length`` on ``cores`` cores: all the cores for a sequential read;
    the parallelism, at most the cores, for a parallel one; a third of the cores (at
    least one) when the parallelism is AUTOTUNE too (a thread for the current and two
    for the next files of each)."""
    from tfinput._src.core.sources.protocol import read_parallelism

    parallel = read_parallelism(config)
    if parallel == 1:
        return cores
    if parallel != AUTOTUNE:
        return min(parallel, cores)
    return -(-cores // 3)


def _plan(key: str, value: object) -> object:
    """What a read-plan knob's recorded value makes of the read: values that make the
    same plan compare equal (``read_batch`` 0 and 1, any two parallel values)."""
    if key == "read_batch" and isinstance(value, int):
        return value if value > 1 else 0
    if key == "interleave_cycle_length" and isinstance(value, str) and "(" in value:
        return int(value.split("(", 1)[1].split()[0])  # "AUTOTUNE (n on c cores)"
    if key == "interleave_block_length" and value == "AUTOTUNE":
        return 1
    if key == "interleave_parallelism" and value is not None:
        return "sequential" if value == 1 else "parallel"
    if key == "prefetch" and value is not None:
        return "none" if value == 0 else "a prefetch stage"
    return value


#: Beyond this many files, an identity holds a summary of them (`_files_summary`): a
#: difference is then named by its kind (other files, another order, a file
#: rewritten), not by file, and a checkpoint does not grow with the number of files.
MAX_LISTED_FILES = 1000


def _file_entry(path: str) -> list[object]:
    """``[absolute path, size, modification time in ns]`` of a local file; a remote
    one (``gs://...``) by its name only (``[path, None, None]``)."""
    if "://" in path:
        return [path, None, None]
    stat = os.stat(path)
    return [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]


def identity_differences(saved: Mapping[str, object], now: Mapping[str, object]) -> list[str]:
    """What differs between a saved pipeline identity and the current one, in words
    (which file; which field, with both values); empty when they match. Values of a
    read-plan knob that make the same plan match (``read_batch`` 0 and 1, two parallel
    ``interleave_parallelism`` values, ``prefetch`` 2 and AUTOTUNE). A current field
    the saved identity lacks (an earlier tfinput's) is named as not recorded. Either may
    be the compact summary of `compact_identity`."""
    # Compared as JSON gives them back (tuples as lists), as a saved identity is read.
    saved, now = (json.loads(json.dumps(x, sort_keys=True, default=str)) for x in (saved, now))
    out: list[str] = []
    unrecorded = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if a == b or _plan(key, a) == _plan(key, b):
            continue
        if key == "files":
            out += _file_differences(a, b)
        elif key not in saved and key not in _OPTIONAL:
            unrecorded.append(f"{key} (now {b!r})")
        elif key != "files_digest":  # an earlier tfinput's; "files" says it
            why = f" ({_WHY[key]})" if key in _WHY else ""
            out.append(f"{key}: saved {a!r}, now {b!r}{why}")
    if unrecorded:
        out.append(
            "the state was saved by an earlier tfinput, which did not record "
            f"{', '.join(unrecorded)}: resume with the tfinput that saved it, or restart "
            "the epoch"
        )
    return out


def _some(paths: list[str], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def _file_differences(saved: object, now: object) -> list[str]:
    if isinstance(saved, dict) or isinstance(now, dict):  # compact summaries
        saved = saved if isinstance(saved, dict) else _files_summary(saved or [])
        now = now if isinstance(now, dict) else _files_summary(now or [])
        if saved.get("names") != now.get("names"):
            return [f"files: other files ({saved.get('count')} saved, {now.get('count')} now)"]
        if saved.get("order") != now.get("order"):
            return [f"files: the same {now.get('count')} files in another order"]
        return [
            "files: a file changed since the save (its size or modification time; a "
            f"compact state, or one of more than {MAX_LISTED_FILES:,} files, does not "
            "record which)"
        ]
    if not isinstance(saved, list) or not isinstance(now, list):
        return ["files: saved by an earlier tfinput, which recorded only a digest"]
    before = {entry[0]: entry for entry in saved}
    after = {entry[0]: entry for entry in now}
    out = []
    if missing := [p for p in before if p not in after]:
        out.append(f"files: {len(missing)} saved but not given now: {_some(missing)}")
    if added := [p for p in after if p not in before]:
        out.append(f"files: {len(added)} given now but not saved: {_some(added)}")
    if not missing and not added and list(before) != list(after):
        i = next(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
        out.append(
            f"files: the same {len(after)} files in another order: number {i + 1} was "
            f"{list(before)[i]}, now {list(after)[i]}; list them in the saved order "
            "(sorted, as a folder or glob gives them)"
        )
    for path, (_, size, mtime) in before.items():
        if path in after and after[path][1:] != [size, mtime]:
            new_size, new_mtime = after[path][1:]
            what = (
                f"size {size:,} -> {new_size:,} bytes"
                if size != new_size
                else f"modified at {_when(mtime)} -> {_when(new_mtime)}"
            )
            out.append(
                f"{path} changed since the save: {what} (a copy that keeps modification "
                "times, cp -p or rsync -t, resumes)"
            )
    return out


def _when(mtime_ns: int | None) -> str:
    if mtime_ns is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(mtime_ns / 1e9)) + " UTC"


def _files_summary(files: list[list[object]]) -> dict[str, object]:
    """A compact summary of an identity's file entries: their number and digests of
    their names (any order), their order, and their sizes and modification times."""

    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]

    return {
        "count": len(files),
        "names": digest(sorted(entry[0] for entry in files)),
        "order": digest([entry[0] for entry in files]),
        "stats": digest([entry[1:] for entry in files]),
    }


def _listed(entries: list[list[object]]) -> list[list[object]] | dict[str, object]:
    return entries if len(entries) <= MAX_LISTED_FILES else _files_summary(entries)


def compact_identity(identity: Mapping[str, object]) -> dict[str, object]:
    """An identity with its file list summarised (`_files_summary`): what a compact
    state carries (under 1 KB whatever the number of files)."""
    out = dict(identity)
    if isinstance(out.get("files"), list):
        out["files"] = _files_summary(out["files"])
    return out


def identified(dataset: tf.data.Dataset, identity: Mapping[str, object]) -> tf.data.Dataset:
    """``dataset``, whose iterators carry ``identity`` into ``tf.train.Checkpoint``: a
    checkpoint of such an iterator restores only into an iterator of a dataset of the
    same identity, and refuses any other at restore with a `ResumeError` naming what
    differs. (Datasets derived from it by further transformations are plain ones.)"""
    return _identified_class()(dataset, json.dumps(identity, sort_keys=True, default=str))


@functools.lru_cache(maxsize=1)
def _identified_class() -> type:
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops  # no public unary base class

    class IdentityCheck(tf.train.experimental.PythonState):
        """Saved beside an iterator's state: the identity of its pipeline. Python state
        is restored before any tensor, so a restore into another pipeline is refused
        here before TensorFlow tries (and fails, where the stages differ) to restore
        the iterator. (Checkpoints that saved it as a tensor read the same.)"""

        def __init__(self, identity: str) -> None:
            self.identity = identity

        def serialize(self) -> str:
            return self.identity

        def deserialize(self, string_value: object) -> None:
            if not isinstance(string_value, str):
                string_value = bytes(string_value).decode()
            saved = json.loads(string_value)
            now = json.loads(self.identity)
            if differences := identity_differences(saved, now):
                raise ResumeError(
                    "tf.train.Checkpoint: this iterator's position was saved from another "
                    f"{saved.get('source')} pipeline. {'. '.join(differences)}. {RESTORE_INTO}"
                )

    class IdentifiedDataset(dataset_ops.UnaryUnchangedStructureDataset):
        """The same dataset; its eager iterators carry an `IdentityCheck`."""

        def __init__(self, dataset: tf.data.Dataset, identity: str) -> None:
            self._tfinput_identity = identity
            super().__init__(dataset, dataset._variant_tensor)

        def __iter__(self) -> object:
            iterator = super().__iter__()
            if tf.executing_eagerly():
                iterator._track_trackable(
                    IdentityCheck(self._tfinput_identity), name="tfinput_pipeline", overwrite=True
                )
            return iterator

    return IdentifiedDataset
