"""Which knobs a saved input position holds to. A restore with another value of a knob
that changes what a state means is refused on both routes (`InputIterator.set_state`
and ``tf.train.Checkpoint``) with a `ResumeError` naming the field and both values; a
restore with another value of any other knob is exactly once (every row once) and,
but for ``deterministic=False``, exact (the batches of the uninterrupted run).
docs/resume.md's table of knobs says the same (checked here)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfinput.config import AUTOTUNE, PipelineConfig, knob_names
from tfinput.errors import ResumeError

ROOT = Path(__file__).resolve().parents[3]
ROWS = 1000  # the shared data set: 4 files, 100-row columnar chunks
# Every row once with drop_remainder=False; 100 rows a batch is whole columnar chunks.
BASE: dict[str, Any] = dict(
    batch_size=100,
    drop_remainder=False,
    shuffle_buffer=200,
    shuffle_seed=1,
    deterministic=True,
    interleave_cycle_length=2,
    interleave_parallelism=2,
    map_parallelism=2,
    prefetch=2,
)
#: Settings of the source (``tfinput.tfrecord(...)``, ``tfinput.columnar(...)``) rather
#: than of the config.
SOURCE_SETTINGS = ("compression", "buffer_size", "shuffle", "shuffle_rows", "verify", "engine")
SAVE_AFTER = 3


@dataclasses.dataclass(frozen=True)
class Case:
    """A restore of a ``kind`` pipeline saved with each knob at its first value and
    restored with its second; ``both`` holds knobs set on both sides."""

    kind: str
    changes: dict[str, tuple[Any, Any]]
    both: dict[str, Any] = dataclasses.field(default_factory=dict)
    exact: bool = True  # False: exactly once, in another order

    def side(self, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(config knobs, source settings) of the saving (0) or restoring (1) side."""
        values = {**BASE, **self.both, **{k: v[i] for k, v in self.changes.items()}}
        source = {k: values.pop(k) for k in SOURCE_SETTINGS if k in values}
        return values, source

    @property
    def id(self) -> str:
        return f"{self.kind}-" + "-".join(f"{k}={a}->{b}" for k, (a, b) in self.changes.items())


def _param(case: Case) -> Any:
    return pytest.param(case, id=case.id)


A = AUTOTUNE
# One knob a case: the message names it with both values.
REFUSED = [
    Case("tfrecord", {"read_batch": (64, 32)}),
    Case("tfrecord", {"read_batch": (64, 128)}),
    Case("tfrecord", {"read_batch": (64, 63)}),  # restores, in another order, without this
    Case("tfrecord", {"read_batch": (0, 64)}),
    Case("tfrecord", {"read_batch": (64, 1)}),
    Case("tfrecord", {"interleave_cycle_length": (2, 3)}),
    Case("tfrecord", {"interleave_block_length": (1, 2)}),
    Case("tfrecord", {"interleave_parallelism": (2, 1)}),
    Case("tfrecord", {"prefetch": (2, 0)}),
    Case("tfrecord", {"batch_size": (100, 50)}),
    Case("tfrecord", {"shuffle_buffer": (200, 400)}),
    Case("tfrecord", {"shuffle_seed": (1, 2)}),
    Case("tfrecord", {"drop_remainder": (False, True)}),
    Case("tfrecord", {"cache": (False, True)}),
    Case("tfrecord", {"layout": ("per_feature", "packed")}),
    Case("columnar", {"interleave_parallelism": (1, 2)}),
    Case("columnar", {"prefetch": (0, 2)}),
    Case("columnar", {"shuffle_rows": (False, True)}),
    Case("columnar", {"verify": (True, False)}),
    Case("columnar", {"shuffle": ("buffer", "global")}, both={"shuffle_buffer": 0}),
    Case("parquet", {"prefetch": (2, 0)}),
    Case("wrapped", {"prefetch": (0, A)}),
]
# A few knobs a case, each to another value that restores exactly.
MAY_CHANGE = [
    Case("tfrecord", {"map_parallelism": (2, 1), "prefetch": (2, 5)}),
    Case("tfrecord", {"map_parallelism": (1, A), "prefetch": (2, A)}),
    Case("tfrecord", {"interleave_parallelism": (2, A), "interleave_block_length": (A, 1)}),
    Case("tfrecord", {"read_batch": (0, 1), "map_parallelism": (A, 1)}),
    Case(
        "tfrecord",
        {
            "private_threadpool_size": (A, 1),
            "max_intra_op_parallelism": (A, 1),
            "autotune_ram_budget": (A, 2**30),
            "autotune_min_parallelism": (A, 2),
        },
    ),
    Case(  # knobs of the training step and of tf.data service: not in a local build
        "tfrecord",
        {
            "steps_per_execution": (1, 4),
            "device_prefetch": (0, 2),
            "sparsecore_workers": (2, 0),
            "sparsecore_prefetch": (0, 4),
            "service_workers": (0, 2),
            "service_compression": ("AUTO", None),
            "service_max_outstanding_requests": (A, 4),
        },
    ),
    Case("tfrecord", {"compression": ("auto", None), "buffer_size": (None, 1 << 16)}),
    Case("tfrecord", {"deterministic": (True, False)}, exact=False),
    Case("tfrecord", {"shuffle_seed": (1, 2)}, both={"shuffle_buffer": 0}),  # nothing shuffled
    Case(  # pyarrow reads batch k from (files, seed, k): the interleave knobs are its threads
        "parquet",
        {
            "read_batch": (64, 32),
            "interleave_cycle_length": (2, 3),
            "interleave_parallelism": (2, 1),
            "map_parallelism": (2, 1),
        },
    ),
    Case("parquet", {"interleave_block_length": (1, 2), "prefetch": (2, A)}),
    Case(
        "columnar", {"read_batch": (64, 0), "map_parallelism": (1, 2), "buffer_size": (None, 4096)}
    ),
    Case(  # the global shuffle reads chunks by offset, not through the interleave
        "global",
        {
            "interleave_cycle_length": (2, 3),
            "interleave_parallelism": (2, 1),
            "interleave_block_length": (1, 2),
        },
        both={"shuffle_buffer": 0},
    ),
    Case(
        "wrapped",
        {
            "interleave_cycle_length": (2, 3),
            "interleave_parallelism": (2, 1),
            "read_batch": (64, 0),
        },
    ),
]


# ------------------------------------------------------------------ the runs
def _row_ids(batch: Any) -> list[int]:
    return np.asarray(batch[0]["dense"]["row_id"]).astype(int).tolist()


def _pipeline(pipeline_of: Any, kind: str, source: dict[str, Any]) -> Any:
    pipeline = pipeline_of("columnar" if kind == "global" else kind)
    settings = {"shuffle": "global", **source} if kind == "global" else source
    if settings:
        pipeline = dataclasses.replace(
            pipeline, source=dataclasses.replace(pipeline.source, **settings)
        )
    return pipeline


@dataclasses.dataclass
class Saved:
    """A position saved after `SAVE_AFTER` batches, both ways, and the run around it
    (`rest` read from ``iterator`` when first asked)."""

    state: bytes
    checkpoint: str
    first: list[list[int]]
    iterator: Any
    _rest: list[list[int]] | None = None

    @property
    def rest(self) -> list[list[int]]:
        if self._rest is None:
            self._rest = [_row_ids(b) for b in self.iterator]
            self.iterator = None
        return self._rest


_SAVED: dict[str, Saved] = {}


@pytest.fixture
def saved(pipeline_of, tmp_path_factory):
    """``saved(case)``: the saving side's `Saved`, once per pipeline and config."""

    def get(case: Case) -> Saved:
        config, source = case.side(0)
        key = json.dumps([case.kind, config, source], sort_keys=True, default=str)
        if key not in _SAVED:
            it = _pipeline(pipeline_of, case.kind, source).iterator(PipelineConfig(**config))
            first = [_row_ids(next(it)) for _ in range(SAVE_AFTER)]
            state = it.get_state()
            prefix = str(tmp_path_factory.mktemp("ckpt") / "ckpt")
            checkpoint = tf.train.Checkpoint(iterator=it.tf_iterator).write(prefix)
            _SAVED[key] = Saved(state, checkpoint, first, it)
        return _SAVED[key]

    return get


def _restore_tf(pipeline: Any, config: PipelineConfig, checkpoint: str) -> Any:
    """``iter(pipeline.build(config))`` restored from a ``tf.train.Checkpoint``."""
    fresh = iter(pipeline.build(config))
    tf.train.Checkpoint(iterator=fresh).read(checkpoint).assert_existing_objects_matched()
    return fresh


def _shown(value: Any) -> str:
    return repr("AUTOTUNE" if value == AUTOTUNE and not isinstance(value, bool) else value)


# ----------------------------------------------------------------- refused
@pytest.mark.parametrize("case", [_param(c) for c in REFUSED])
def test_a_restore_with_another_value_is_refused_on_both_routes(case, saved, pipeline_of):
    """`InputIterator.set_state` refuses before TensorFlow reads the state, and the
    identity a built dataset's iterator carries refuses a ``tf.train.Checkpoint``
    restore; both name the field and both values."""
    ((knob, (before, after)),) = case.changes.items()
    position = saved(case)
    config, source = case.side(1)
    pipeline = _pipeline(pipeline_of, case.kind, source)
    named = re.escape(f"{knob}: saved {_shown(before)}, now {_shown(after)}")
    restored = pipeline.iterator(PipelineConfig(**config))
    with pytest.raises(
        ResumeError, match=f"^set_state: the state was saved from another .*{named}"
    ):
        restored.set_state(position.state)
    with pytest.raises(
        ResumeError, match=f"^tf.train.Checkpoint: this iterator's position was saved .*{named}"
    ):
        _restore_tf(pipeline, PipelineConfig(**config), position.checkpoint)


# -------------------------------------------------------------- may change
@pytest.mark.parametrize("case", [_param(c) for c in MAY_CHANGE])
def test_a_restore_with_another_value_is_exactly_once(case, saved, pipeline_of):
    """The rest of the epoch after an `InputIterator` restore holds every row not yet
    delivered, once (the batches of the uninterrupted run but where
    ``deterministic=False``); a ``tf.train.Checkpoint`` restore continues there too."""
    position = saved(case)
    config, source = case.side(1)
    pipeline = _pipeline(pipeline_of, case.kind, source)
    restored = pipeline.iterator(PipelineConfig(**config))
    restored.set_state(position.state)
    got = [_row_ids(b) for b in restored]
    rows = sorted(row for batch in position.first + got for row in batch)
    assert rows == list(range(ROWS)), f"{len(rows)} rows, {len(set(rows))} distinct"
    fresh = _restore_tf(pipeline, PipelineConfig(**config), position.checkpoint)
    after = _row_ids(next(fresh))
    if case.exact:
        assert got == position.rest
        assert after == position.rest[0]
    else:
        assert not set(after) & {row for batch in position.first for row in batch}


def test_keras_input_checkpoint_refuses_another_read_batch(pipeline_of, tmp_path):
    """Keras ``fit``'s route: `KerasInputCheckpoint.restore` restores the position by
    `InputIterator.set_state`, so a restart with another ``read_batch`` is refused."""
    import keras

    from tests.helpers import SMALL_RANKING_MODEL
    from tfinput import models
    from tfinput.resume import KerasInputCheckpoint

    if keras.config.backend() != "tensorflow":
        pytest.skip("the in-process Keras test runs on the TensorFlow backend")
    config = PipelineConfig(**dict(BASE, drop_remainder=True))
    pipeline = pipeline_of("tfrecord")
    ckpt = KerasInputCheckpoint(pipeline.iterator(config), str(tmp_path / "ckpt"), every=2)
    model = models.ranking_model(pipeline.schema, jit_compile=False, **SMALL_RANKING_MODEL)
    model.fit(
        ckpt.batches(), steps_per_epoch=2, callbacks=[ckpt.callback()], shuffle=False, verbose=0
    )
    other = pipeline.iterator(dataclasses.replace(config, read_batch=32))
    again = KerasInputCheckpoint(other, str(tmp_path / "ckpt"), every=2)
    with pytest.raises(ResumeError, match=re.escape("read_batch: saved 64, now 32")):
        again.restore(
            models.ranking_model(pipeline.schema, jit_compile=False, **SMALL_RANKING_MODEL)
        )


# ------------------------------------------------------- other hosts, old states
_SAVE_ON_ONE_CORE = """
import os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before TensorFlow starts
import tfinput
from tfinput import testing
from tfinput.config import PipelineConfig
files, out = sys.argv[1:-1], sys.argv[-1]
config = PipelineConfig(**__import__("json").loads(os.environ["CONFIG"]))
it = tfinput.tfrecord(files, testing.small_schema()).iterator(config)
next(it)
open(out, "wb").write(it.get_state())
"""


@pytest.mark.slow  # a TensorFlow process on one core
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two cores to save on one and restore on two",
)
def test_an_autotuned_cycle_length_is_refused_on_a_host_where_it_differs(
    small_tfrecord, small_schema, tmp_path
):
    """AUTOTUNE reads as many files at once as the host has cores (a sequential
    interleave): a state saved on a 1-core host names both numbers on a 2-core one
    instead of failing in TensorFlow."""
    import tfinput

    config = dict(BASE, interleave_cycle_length=AUTOTUNE, interleave_parallelism=1)
    out = tmp_path / "state"
    env = {**os.environ, "CONFIG": json.dumps(config), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", _SAVE_ON_ONE_CORE, *small_tfrecord, str(out)],
        env=env,
        check=True,
        capture_output=True,
    )
    cores = len(os.sched_getaffinity(0))
    here = tfinput.tfrecord(small_tfrecord, small_schema).iterator(PipelineConfig(**config))
    with pytest.raises(
        ResumeError,
        match=re.escape(
            f"interleave_cycle_length: saved 'AUTOTUNE (1 on 1 cores)', now "
            f"'AUTOTUNE ({cores} on {cores} cores)' (files read at once; AUTOTUNE takes it "
            "from the host's cores"
        ),
    ):
        here.set_state(out.read_bytes())


def test_a_state_of_an_earlier_tfinput_without_the_read_plan_is_refused(pipeline_of):
    """A state whose identity lacks the read-plan knobs (saved before they were
    recorded) cannot be checked: refused, naming what it lacks."""
    config = PipelineConfig(**BASE)
    it = pipeline_of("tfrecord").iterator(config)
    next(it)
    state = zipfile.ZipFile(io.BytesIO(it.get_state()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in state.namelist():
            data = state.read(name)
            if name == "header.json":
                header = json.loads(data)
                for knob in ("read_batch", "prefetch"):
                    del header["identity"][knob]
                data = json.dumps(header).encode()
            z.writestr(name, data)
    with pytest.raises(
        ResumeError,
        match=re.escape(
            "the state was saved by an earlier tfinput, which did not record prefetch "
            "(now 2), read_batch (now 64): resume with the tfinput that saved it"
        ),
    ):
        pipeline_of("tfrecord").iterator(config).set_state(out.getvalue())


# ------------------------------------------------------------ the docs' table
def _docs_table() -> dict[str, tuple[str, str]]:
    """docs/resume.md's table of knobs: each name in backticks in a row's first cell ->
    (its "refused" cell, its "may change" cell)."""
    text = (ROOT / "docs" / "resume.md").read_text()
    section = text.split("## Which knobs may change across a restore", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or set(cells[0]) <= {"-"}:
            continue
        for name in re.findall(r"`([a-z_]+)`", cells[0]):
            rows[name] = (cells[1], cells[2])
    return rows


def test_the_docs_table_lists_every_knob_as_the_tests_find_it():
    """Every config knob and source setting has a row; a knob a case refuses is not
    "never refused" there, one a case changes is not "never may change", and every
    row's claim is tested here (but ``engine``'s: tensorflow-io is not installed)."""
    table = _docs_table()
    names = [*knob_names(), *SOURCE_SETTINGS]
    missing = [k for k in names if k not in table]
    assert not missing, f"docs/resume.md's table lacks {missing}"
    refused = {k for c in REFUSED for k in c.changes}
    may = {k for c in MAY_CHANGE for k in c.changes}
    for knob in names:
        never_refused, never_changes = (cell in ("", "-") for cell in table[knob])
        assert not (never_refused and knob in refused), f"{knob}: refused, the table says never"
        assert not (never_changes and knob in may), f"{knob}: may change, the table says never"
        assert knob in refused | may or knob == "engine", f"{knob}: no case tests its row"
