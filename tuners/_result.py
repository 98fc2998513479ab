"""What `tuners.tune` returns and records: `TuneResult`, `TrialsFailedError`; how every
number was taken (the machine's fingerprint, the method, the step and pruner) is
`tuners._method`'s."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput.config import PipelineConfig
from tfinput.errors import OutputError, TfinputError

if TYPE_CHECKING:  # pragma: no cover
    import optuna

    from tfinput._src.measurement.compare import ConfigStats
    from tuners._advice import KnobContribution
    from tuners._columnar_advice import FormatAdvice


class TrialsFailedError(TfinputError):
    """No trial of the search completed: the step or the pipeline raises whatever the
    config. The message names the last error; ``study`` holds the failed trials."""

    def __init__(self, message: str, *, study: optuna.Study | None = None) -> None:
        super().__init__(message)
        self.study = study


class StudyLockedError(TfinputError, RuntimeError):
    """The study's SQLite database stayed locked by another writer longer than the busy
    timeout (SQLite lets one process write at a time): the search cannot record a trial.

    The message is one line naming the database file. ``trials`` holds what this
    process knows of the study's trials (the database cannot be read while locked):
    those it saw finished before the lock and those it measured; `to_dict` is the
    ``result.json`` of the run (no verdict), `write` writes it. The study itself keeps
    every trial recorded before the lock: the same call resumes it once the other
    writer is done.

    Attributes:
      path: The database file.
      study_name: The study's name.
      stage: ``"open"`` (the study could not be opened), ``"search"`` or
        ``"confirmation"``.
      trials: `tuners._trials.summarize_trials` rows.
    """

    def __init__(
        self,
        *,
        path: str,
        study_name: str,
        stage: str,
        waited: float,
        trials: list[dict[str, object]] | None = None,
    ) -> None:
        self.path = path
        self.study_name = study_name
        self.stage = stage
        self.trials = list(trials or [])
        during = "the study was opened" if stage == "open" else f"the {stage} ran"
        super().__init__(
            f"the study database {path} is locked: another writer held it for more than "
            f"{waited:g} s while {during} (SQLite lets one process write at a time)"
        )

    @property
    def completed(self) -> int:
        return sum(1 for t in self.trials if t["state"] == "complete")

    def to_dict(self) -> dict[str, object]:
        """The ``result.json`` of the run: the trials known, the search's best
        (unconfirmed), no verdict and no best config."""
        return {
            "format": "tfinput.tune/1",
            "error": str(self),
            "locked": {"database": self.path, "stage": self.stage},
            "best_config": None,
            "best_trial": _best_trial(self.trials),
            "beats_autotune": None,
            "verdicts": [],
            "study_name": self.study_name,
            "trials_detail": self.trials,
        }

    def write(self, out_dir: str | Path) -> Path:
        """Write `to_dict` as ``result.json`` in ``out_dir`` (made if missing), whole or
        not at all; its path.

        Raises:
          OSError: ``out_dir`` cannot be written.
        """
        return write_whole(Path(out_dir) / "result.json", _json(self.to_dict()))


def _best_trial(
    rows: list[dict[str, object]], config_of: Callable[[int], Any] | None = None
) -> dict[str, object] | None:
    """The best complete trial of ``rows`` as ``result.json``'s ``best_trial``
    (``confirmed: false``), or None."""
    done = [r for r in rows if r["state"] == "complete" and r["value"] is not None]
    best = max(done, key=lambda r: r["value"], default=None)
    if best is None:
        return None
    config = best.get("config") if config_of is None else config_of(best["number"])
    return {
        "number": best["number"],
        "name": best["baseline"] or f"trial {best['number']}",
        "median_examples_per_s": best["median"],
        "config": config,
        "confirmed": False,
    }


def _json(data: dict[str, object]) -> str:
    import json

    return json.dumps(data, indent=2, default=str) + "\n"


def write_whole(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: into a hidden file beside it
    (``.NAME.tfinput-staging-PID``, with the mode the umask gives), flushed to disk, then
    renamed over it. ``path``'s folder is made if missing. A full disk (or any error,
    Ctrl-C included) leaves ``path`` as it was and no partial file.

    Raises:
      TuneOutputError: the file cannot be written, naming it and the reason.
    """
    import os

    staged = path.with_name(f".{path.name}.tfinput-staging-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(staged, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staged, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        if isinstance(e, OSError):
            raise TuneOutputError(path, e, size=len(text.encode())) from e
        raise
    return path


class TuneOutputError(OutputError):
    """An output file of the tuner could not be written (a full disk, a file too
    large, permission denied): names the file and the reason; nothing partial is left
    at its path."""

    def __init__(self, path: Path, error: OSError, *, size: int, kept: str = "") -> None:
        reason = error.strerror or str(error)
        super().__init__(
            f"cannot write {path} ({size / 1e6:,.1f} MB): {reason}; nothing partial was left "
            f"there{kept}"
        )
        self.path = path
        self.error = error
        self.size = size
        self.errno = error.errno
        self.reason = reason

    def kept(self, written: list[Path]) -> TuneOutputError:
        """This error, saying which files were written whole before it."""
        if not written:
            return self
        names = " and ".join(p.name for p in written)
        verb = "is" if len(written) == 1 else "are"
        where = f"; {names} {verb} written in {written[0].parent}"
        return TuneOutputError(self.path, self.error, size=self.size, kept=where)


class TuneInterrupted(KeyboardInterrupt):
    """Ctrl-C (a ``KeyboardInterrupt``) during `tuners.tune`, once the study is open.

    Still a ``KeyboardInterrupt`` (``except KeyboardInterrupt`` catches it), carrying
    what was done: ``study`` holds the completed trials (also in its storage when one
    was given, so the same call resumes the study), ``stage`` says where it stopped:
    ``"search"``, or ``"confirmation"`` (the confirmation, the gain by knob or the
    format advice). No verdict is claimed from an unfinished confirmation.
    `to_dict` is the ``result.json`` of an interrupted run; `write` writes it.

    Attributes:
      study: The Optuna study.
      stage: ``"search"`` or ``"confirmation"``.
      storage: The storage the study is kept in, as given (None: in memory, lost).
      requeued: Trials stopped by the interrupt whose parameters were enqueued again
        in the storage (measured first when the study resumes).
    """

    def __init__(
        self,
        study: optuna.Study,
        *,
        stage: str,
        storage: Any = None,
        requeued: tuple[int, ...] = (),
    ) -> None:
        super().__init__(f"tune interrupted during the {stage}")
        self.study = study
        self.stage = stage
        self.storage = storage
        self.requeued = tuple(requeued)

    @property
    def completed(self) -> int:
        """Trials that completed (measured to the end, not pruned)."""
        import optuna

        states = (optuna.trial.TrialState.COMPLETE,)
        return len(self.study.get_trials(deepcopy=False, states=states))

    def describe(self) -> str:
        """``interrupted during the search after 3 completed trials; no verdict: ...``."""
        if self.stage == "search":
            why = "the confirmation against autotune did not run"
        else:
            why = "the confirmation against autotune did not finish"
        return (
            f"interrupted during the {self.stage} after {self.completed} completed "
            f"trial{'s' if self.completed != 1 else ''}; no verdict: {why}"
        )

    def to_dict(self) -> dict[str, object]:
        """The ``result.json`` of the interrupted run: every trial, the search's best
        (unconfirmed), no verdict and no best config."""
        from tuners._trials import state_counts, summarize_trials

        rows = summarize_trials(self.study)
        trials = self.study.get_trials(deepcopy=False)
        return {
            "format": "tfinput.tune/1",
            "interrupted": {"stage": self.stage, "message": self.describe()},
            "best_config": None,
            "best_trial": _best_trial(rows, lambda n: trials[n].user_attrs.get("config")),
            "beats_autotune": None,
            "verdicts": [],
            "study_name": self.study.study_name,
            "storage": None if self.storage is None else _shown(self.storage),
            "requeued": list(self.requeued),
            "trials": state_counts(self.study),
            "trials_detail": rows,
        }

    def write(self, out_dir: str | Path) -> Path:
        """Write `to_dict` as ``result.json`` in ``out_dir`` (made if missing); its path.

        Raises:
          OSError: ``out_dir`` cannot be written.
        """
        return write_whole(Path(out_dir) / "result.json", _json(self.to_dict()))


def _shown(storage: Any) -> str:
    """A storage as the user gave it, its password hidden (an Optuna storage object: its
    class name)."""
    if not isinstance(storage, str):
        return type(storage).__name__
    from tuners._storage import redact

    return redact(storage)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneResult:
    """Outcome of `tune`.

    Attributes:
      best_config: The config to train with (saved as ``best_config.json``): the winner
        of the confirmation round, or autotune when the verdict is "keep autotune" (the
        winner's gain is within the noise); the config measured best is then
        `measured_best`.
      best_name: Its name there (``trial N``, ``autotune`` or ``current``).
      confirmed: Every config of the confirmation round (`tfinput._src.measurement.compare.ConfigStats`:
        median, spread, ratio to autotune per round), ranked by the paired ratio to
        autotune (the median of the per-round ratios: the figure the verdict reads),
        best first.
      study_name: Optuna study name.
      storage: Where the study is kept, as given, password redacted (None: in memory,
        or an Optuna storage object).
      trials: Counts by state (``complete``, ``pruned``, ``fail``, ``running``...).
      seconds: Wall time of the search and of the confirmation.
      fingerprint: Hardware and software the numbers belong to.
      method: How every number was measured.
      step: Description of the step.
      space: The search space.
      advice: Extra advice (learning-rate scaling when the batch size changed).
      confirmation_error: Why the confirmation failed (twice) when it did: then
        ``confirmed`` is empty and the winner is the best trial of the search, not
        confirmed against autotune; None when the confirmation ran.
      warnings: What went wrong without stopping the run (a search stopped after too
        many failed trials in a row, a confirmation retried after an error).
      beats_autotune: True only when the confirmed winner's per-round ratios to
        autotune are all above 1 (the paired spread excludes 1); False: keep autotune;
        None: not confirmed.
      input_wait: Share of the step's time spent waiting for input with the winner
        (measured; or ``1 - fed / step_bound`` when the step owns the loop); None when
        unknown.
      input_wait_source: ``measured``, ``step bound`` or None.
      input_bound: Whether the input bounds training, judged against the rounds'
        spread (`tuners._advice.input_verdict`); None when it cannot be told.
      step_bound: Examples/s of the step fed one cached batch (when it was measured).
      verdicts: The plain-language verdicts: beats autotune or "keep autotune", and
        whether input is the bottleneck.
      breakdown: The gain by knob group (`tuners._advice.KnobContribution`), largest
        first; empty when not measured.
      format_advice: `tuners._advice.FormatAdvice` when a tf.Example sample was
        converted to columnar and measured, else None.
      packed_layout: When the best config emits packed batches, where each feature
        lives in them (`tfinput.layout.PackedLayout.to_dict`), saved next to the config
        so a model or a serving graph can slice them; else None.
      budget: The run's time (`tuners._budget.Budget.to_dict`): the timeout, the
        seconds the run took on the measurement clock, and its longest window (the
        run ends within the timeout plus one window).
    """

    best_config: PipelineConfig
    best_name: str
    confirmed: tuple[ConfigStats, ...]
    study_name: str
    trials: dict[str, int]
    seconds: dict[str, float]
    fingerprint: dict[str, object]
    method: dict[str, object]
    step: dict[str, object]
    space: dict[str, list[Any]]
    advice: tuple[str, ...] = ()
    confirmation_error: str | None = None
    warnings: tuple[str, ...] = ()
    beats_autotune: bool | None = None
    input_wait: float | None = None
    input_wait_source: str | None = None
    input_bound: bool | None = None
    step_bound: float | None = None
    verdicts: tuple[str, ...] = ()
    breakdown: tuple[KnobContribution, ...] = ()
    format_advice: FormatAdvice | None = None
    packed_layout: dict[str, object] | None = None
    storage: str | None = None
    budget: dict[str, object] | None = None
    study: optuna.Study | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def measured_best(self) -> ConfigStats | None:
        """The config measured best in the confirmation, by the paired ratio to
        autotune (None when not confirmed); it is `best_config` unless the verdict kept
        autotune."""
        return self.confirmed[0] if self.confirmed else None

    @property
    def saved_stats(self) -> ConfigStats | None:
        """The confirmation's figures of `best_config` (None when not confirmed)."""
        return next((c for c in self.confirmed if c.name == self.best_name), None)

    @property
    def kept_autotune(self) -> bool:
        """Whether autotune is saved although another config measured best (its gain
        was within the noise)."""
        best = self.measured_best
        return best is not None and best.name != self.best_name

    @property
    def ratio_vs_autotune(self) -> float | None:
        """`best_config`'s confirmed ratio to autotune (1.0 when autotune is kept)."""
        saved = self.saved_stats
        return saved.ratio if saved is not None else None

    def measured_best_record(self) -> dict[str, object] | None:
        """``result.json``'s ``measured_best``: the config measured best, its figures
        and ratio range, and whether it is the saved config (``saved``)."""
        best = self.measured_best
        if best is None:
            return None
        return {**best.to_dict(), "saved": not self.kept_autotune}

    def record(self) -> dict[str, object]:
        """Metadata stored next to the best config in its JSON file."""
        return {
            "fingerprint": self.fingerprint,
            "method": self.method,
            "step": self.step,
            "confirmed": None if self.saved_stats is None else self.saved_stats.to_dict(),
            "confirmation_error": self.confirmation_error,
            "beats_autotune": self.beats_autotune,
            "input_bound": self.input_bound,
            "verdicts": list(self.verdicts),
            "packed_layout": self.packed_layout,
            "resume": resume_record(self.best_config),
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "format": "tfinput.tune/1",
            "best_name": self.best_name,
            "best_config": self.best_config.to_dict(),
            "ratio_vs_autotune": self.ratio_vs_autotune,
            "measured_best": self.measured_best_record(),
            "confirmed": [c.to_dict() for c in self.confirmed],
            "study_name": self.study_name,
            "storage": self.storage,
            "trials": self.trials,
            "seconds": self.seconds,
            "budget": self.budget,
            "fingerprint": self.fingerprint,
            "method": self.method,
            "step": self.step,
            "space": self.space,
            "advice": list(self.advice),
            "confirmation_error": self.confirmation_error,
            "warnings": list(self.warnings),
            "beats_autotune": self.beats_autotune,
            "input_wait": None if self.input_wait is None else round(self.input_wait, 4),
            "input_wait_source": self.input_wait_source,
            "input_bound": self.input_bound,
            "step_bound_examples_per_s": (
                None if self.step_bound is None else round(self.step_bound, 1)
            ),
            "verdicts": list(self.verdicts),
            "breakdown": [c.to_dict() for c in self.breakdown],
            "format_advice": None if self.format_advice is None else self.format_advice.to_dict(),
            "packed_layout": self.packed_layout,
            "resume": resume_record(self.best_config),
        }


def resume_record(config: PipelineConfig) -> dict[str, object]:
    """Whether a pipeline built with ``config`` resumes exactly after a restart from a
    saved input position (`tfinput.resume`), saved next to the best config.

    Every knob the tuner searches keeps the pipeline checkpointable (it never searches
    tf.data service, whose iterators cannot be saved); two change what a restore gives:

    - ``deterministic=False``: the position saves and restores without losing or
      repeating an example, but the order after the restore differs from an
      uninterrupted run, so the resumption is not exact.
    - ``cache=True``: exact, but the saved state holds the cached records (all of them
      once the first epoch is read), so each checkpoint is about the size of the data.

    Args:
      config: The config to describe.

    Returns:
      ``{"exact": bool, "reasons": [why not exact], "notes": [other remarks],
      "verify": the command that checks it on the user's files}``. Whether the source
      itself can be saved (a wrapped ``from_generator`` dataset cannot) is not known
      from the config: the ``verify`` command checks it.
    """
    reasons, notes = [], []
    if config.deterministic is False:
        reasons.append(
            "deterministic=False: the input position saves and restores without losing "
            "or repeating an example, but the order after a restore differs from an "
            "uninterrupted run; for exact resumption tune with --fix deterministic=true"
        )
    if config.cache:
        notes.append(
            "cache=true: the saved input state holds the cached records (all of them once "
            "the first epoch is read), so each checkpoint is about the size of the data; "
            "tune without --tune-cache (or with --fix cache=false) to keep it small"
        )
    return {
        "exact": not reasons,
        "reasons": reasons,
        "notes": notes,
        "verify": "tfinput check DATA --resume --config best_config.json",
    }
