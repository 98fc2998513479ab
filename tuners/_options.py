"""What `tuners.tune` takes besides the pipeline, the step, the space, the configs and
its budget (``n_trials``, ``timeout``): one frozen `TuneOptions` of four small groups.

    options = tuners.TuneOptions(
        search=tuners.SearchOptions(seed=1),
        study=tuners.StudyOptions(storage="postgresql://db/tune", study_name="ranker"),
    )
    result = tuners.tune(pipeline, step=step, n_trials=50, timeout=3600, options=options)

``tfinput tune`` maps its arguments onto these objects in one place.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from tfinput._src.core.options import check_counts
from tfinput._src.measurement.target import MeasureOptions
from tfinput.errors import ConfigError
from tuners._storage import GRACE_PERIOD, HEARTBEAT_INTERVAL

if TYPE_CHECKING:
    import optuna

#: Failed trials in a row (by every worker together) after which the search stops.
MAX_CONSECUTIVE_FAILURES = 5


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """How the search proposes configs, and when it gives up (its length is `tuners.tune`'s
    ``n_trials`` and ``timeout``).

    Attributes:
      seed: The default sampler's seed (default None: each process draws its own, and
        the result records it as ``method.sampler_seed``). A fixed seed makes one
        process's proposals reproducible; workers that share a study, or a study
        resumed after Ctrl-C, should leave it out: with one seed they propose the same
        configs in the same order (the study never measures a config twice, but each
        repeat is a proposal spent on a config already known).
      sampler, pruner: Optuna overrides (default: seeded multivariate TPE with the
        constant liar; `tuners._objective.NoiseAwarePruner`: bottom quarter beyond the
        measured noise, after one window).
      max_consecutive_failures: Stop after this many failed trials in a row: a step
        or pipeline that always raises ends the study instead of failing forever.
        Higher tolerates spaces with many configs that do not fit in memory.

    Raises:
      ConfigError: ``max_consecutive_failures`` below 1.
    """

    seed: int | None = None
    sampler: optuna.samplers.BaseSampler | None = None
    pruner: optuna.pruners.BasePruner | None = None
    max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES

    def __post_init__(self) -> None:
        check_counts(max_consecutive_failures=self.max_consecutive_failures)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """Where the trials are kept, and how workers share them.

    Attributes:
      storage: None (in memory), a path or URL (``.db``/``sqlite:///``: one host,
        resumable; ``.log``/``.journal``: several processes on one host;
        ``postgresql://``: several hosts), or an Optuna storage.
      study_name: The study's name in the storage (default: a fresh name for an
        in-memory study; required to share or resume one).
      load_if_exists: Resume the named study if the storage already holds it.
      lock_path: The host lock file: one trial measures per host at a time
        (default: one per user in the temp directory).
      heartbeat_interval, grace_period: Seconds between a running trial's heartbeats,
        and of silence after which another worker fails and retries it (RDB storages).
    """

    storage: str | optuna.storages.BaseStorage | None = None
    study_name: str | None = None
    load_if_exists: bool = True
    lock_path: str | None = None
    heartbeat_interval: int = HEARTBEAT_INTERVAL
    grace_period: int = GRACE_PERIOD


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfirmOptions:
    """What happens after the search: the confirmation and the advice.

    Attributes:
      confirm_top: The best configs of the search re-measured against ``autotune``:
        distinct pipelines, other than autotune's and the current config's.
      confirm_windows: Interleaved windows per config in the confirmation.
      breakdown: When the winner differs from autotune, measure the gain by knob
        group (`tuners._advice.knob_breakdown`: one more confirmation's worth of
        windows per differing group, at most six groups).
      advise_format: For tf.Example TFRecord data whose parse stage is the bound,
        convert a sample (at most 2 files, in a temporary directory) to columnar
        records and measure both side by side (`tuners.format_advice`).
      schema_path: The pipeline's schema file, for the ``tfinput convert`` command
        of the format advice.
      target_rate: Examples/s the training needs: for a pipeline read through
        tf.data service, the advice says how many workers the winner's confirmed
        rate implies (`tfinput.service.workers_needed`).

    Raises:
      ConfigError: ``confirm_top`` or ``confirm_windows`` below 1, or a
        ``target_rate`` that is not a positive number.
    """

    confirm_top: int = 3
    confirm_windows: int = 5
    breakdown: bool = True
    advise_format: bool = True
    schema_path: str | None = None
    target_rate: float | None = None

    def __post_init__(self) -> None:
        check_counts(confirm_top=self.confirm_top, confirm_windows=self.confirm_windows)
        rate = self.target_rate
        if rate is not None and not (isinstance(rate, (int, float)) and 0 < rate < math.inf):
            raise ConfigError(f"target_rate must be a positive number of examples/s, got {rate!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneOptions:
    """Everything `tuners.tune` takes besides the pipeline, step, space, configs and
    budget.

    Attributes:
      search: `SearchOptions`: seed, sampler, pruner and the failures tolerated.
      study: `StudyOptions`: the storage and how workers share it.
      measurement: `tfinput.bench.MeasureOptions`: each trial's window counts
        (default `TUNER_PLAN`: 5 warm-up batches, 5 windows of at least 0.5 s and 20
        batches, sized from the warm-up's rate), the CPUs the
        default space and the heuristic baseline are sized for, and the clocks.
      confirmation: `ConfirmOptions`: the confirmation and the advice.
    """

    search: SearchOptions = dataclasses.field(default_factory=SearchOptions)
    study: StudyOptions = dataclasses.field(default_factory=StudyOptions)
    measurement: MeasureOptions = dataclasses.field(default_factory=MeasureOptions)
    confirmation: ConfirmOptions = dataclasses.field(default_factory=ConfirmOptions)
