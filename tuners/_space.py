"""The search space: which values of each `PipelineConfig` knob the tuner may try.

Every knob is a categorical choice over a short list of values derived from the CPU
count (and the number of files); ``AUTOTUNE`` is one of the choices wherever tf.data
can tune the knob, so tf.data's own tuning competes on equal terms. Categorical
choices keep the space honest for TPE and GP alike: the values are few and not on a
meaningful numeric scale (``AUTOTUNE`` is -1).

    space = SearchSpace.default(cpu_count=2, files=8)
    space = space.fix(batch_size=4096).narrow(map_parallelism=[2, 3, 4])
    config = space.suggest(trial, base=PipelineConfig(batch_size=4096))

Besides the tf.data knobs the space holds the *feeding* knobs, each only where it
means something: ``layout`` (``per_feature``/``packed``) for pipelines whose multi-hot
lists are dense, ``steps_per_execution`` for ``keras_fit`` steps (the step runs
``model.fit`` and honours it), ``device_prefetch`` for steps that feed the device
themselves (``Step.feeds_device``), and ``sparsecore_workers`` / ``sparsecore_prefetch``
for steps that preprocess batches for SparseCore (``Step.feeds_sparsecore``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfinput._src.measurement.target import Target
from tfinput.config import AUTOTUNE, LAYOUTS, PipelineConfig, knob_names
from tfinput.errors import ConfigError
from tfinput.steps import Step

if TYPE_CHECKING:
    import optuna

    from tfinput._src.measurement.target import Measurable
    from tfinput.service import ServiceRead

#: Knobs the tuner searches by default. ``batch_size`` joins only when allowed;
#: ``shuffle_buffer``/``shuffle_seed``/``drop_remainder`` change what is trained on and
#: ``autotune_ram_budget`` is a memory cap, so they stay as the user set them.
TUNABLE = (
    "interleave_cycle_length",
    "interleave_block_length",
    "interleave_parallelism",
    "map_parallelism",
    "prefetch",
    "private_threadpool_size",
    "max_intra_op_parallelism",
    "autotune_min_parallelism",
    "deterministic",
    "cache",
    "read_batch",
)

#: Feeding knobs: searched only where the pipeline or the step honours them (see
#: `SearchSpace.default`).
FEEDING = (
    "layout",
    "steps_per_execution",
    "device_prefetch",
    "sparsecore_workers",
    "sparsecore_prefetch",
)

#: Knobs of a pipeline read through tf.data service (`Pipeline.with_service`).
SERVICE = ("service_workers", "service_compression", "service_max_outstanding_requests")
SERVICE_OUTSTANDING_CHOICES = (AUTOTUNE, 2, 8)

#: Candidate values of ``read_batch`` (TFRecord: records per mini-batch handed from the
#: file branches; 0: one record at a time). Other sources ignore it, so it is searched
#: only for TFRecord pipelines (`SearchSpace.for_pipeline`).
READ_BATCH_CHOICES = (0, 64, 256, 1024)

#: Candidate values of the feeding knobs.
LAYOUT_CHOICES = LAYOUTS
STEPS_PER_EXECUTION_CHOICES = (1, 8, 32)
DEVICE_PREFETCH_CHOICES = (0, 2)
#: ``sparsecore_prefetch``: 0 is twice the workers.
SPARSECORE_PREFETCH_CHOICES = (0, 2, 8)

#: How a None knob value (``layout``: the pipeline's own) is stored in Optuna.
_NONE = "none"


#: Values that build the same pipeline as another value of the space.
_EQUIVALENT: dict[tuple[str, Any], Any] = {
    ("deterministic", "autotune"): True,  # tf.data's default is deterministic
    ("interleave_block_length", "autotune"): 1,
    ("private_threadpool_size", 0): AUTOTUNE,  # 0 and unset both mean the shared pool
}


def canonical(knob: str, value: Any) -> Any:
    """The value of ``knob`` that builds the same pipeline as ``value`` and stands for
    it in the space (``deterministic="autotune"`` is ``True``...); ``value`` itself
    when it has no such twin."""
    return _EQUIVALENT.get((knob, encode(value)), value)


def encode(value: Any) -> Any:
    """Optuna-storable form of a knob value (``AUTOTUNE`` is stored as "autotune", None
    as "none")."""
    if value is None:
        return _NONE
    if value is AUTOTUNE or (
        isinstance(value, int) and not isinstance(value, bool) and value == AUTOTUNE
    ):
        return "autotune"
    return value


def label(value: Any) -> str:
    """A knob value as the reports show it: ``AUTOTUNE`` as "autotune", never -1."""
    return str(encode(value))


def decode(value: Any) -> Any:
    """The knob value of an `encode`-d one."""
    if value == _NONE:
        return None
    return AUTOTUNE if value == "autotune" else value


def _tf_data_choices(cpus: int, files: int) -> dict[str, tuple[Any, ...]]:
    """The tf.data knobs' values for ``cpus`` cores and ``files`` input files."""
    cycle = [AUTOTUNE] + [v for v in (1, 2, 4, 8, 16) if v <= max(1, min(files, 4 * cpus))]
    return {
        "interleave_cycle_length": tuple(cycle),
        "interleave_block_length": (1, 4, 16),
        "interleave_parallelism": _uniq([AUTOTUNE, 1, 2, cpus]),
        "map_parallelism": _uniq([AUTOTUNE, *range(1, 2 * cpus + 1)]),
        "prefetch": (AUTOTUNE, 1, 2, 4, 8),
        "private_threadpool_size": _uniq([AUTOTUNE, cpus, 2 * cpus]),
        "max_intra_op_parallelism": (AUTOTUNE, 1),
        **min_parallelism_choices(cpus),
        "deterministic": (True, False),
        "read_batch": READ_BATCH_CHOICES,
    }


def has_min_parallelism() -> bool:
    """Whether this TensorFlow's tf.data has ``Options.autotune.min_parallelism``
    (2.20 and later): ``autotune_min_parallelism`` is searched only there."""
    import tensorflow as tf

    return hasattr(tf.data.Options().autotune, "min_parallelism")


def min_parallelism_choices(cpus: int) -> dict[str, tuple[Any, ...]]:
    """``autotune_min_parallelism``'s values (tf.data's default, 2, the cores) where
    TensorFlow has the option; nothing where it has not."""
    if not has_min_parallelism():
        return {}
    return {"autotune_min_parallelism": _uniq([AUTOTUNE, 2, cpus])}


def _feeding_choices(
    step: Step, multi_hot_format: str | None, cpus: int
) -> dict[str, tuple[Any, ...]]:
    """The feeding knobs ``step`` reads (`SearchSpace.default`'s ``step``)."""
    choices: dict[str, tuple[Any, ...]] = {}
    if multi_hot_format == "dense" and step.accepts_packed:
        choices["layout"] = LAYOUT_CHOICES
    if step.kind == "keras_fit":
        choices["steps_per_execution"] = STEPS_PER_EXECUTION_CHOICES
    if step.feeds_device:
        choices["device_prefetch"] = DEVICE_PREFETCH_CHOICES
    if step.feeds_sparsecore:
        choices["sparsecore_workers"] = _uniq([v for v in (1, 2, 4, cpus) if v <= cpus])
        choices["sparsecore_prefetch"] = SPARSECORE_PREFETCH_CHOICES
    return choices


def _uniq(values: Sequence[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return tuple(out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """Candidate values per knob; knobs absent from ``choices`` keep the base config's
    value.

    Attributes:
      choices: ``{knob: (value, ...)}`` with ``AUTOTUNE`` allowed where tf.data allows it.
    """

    choices: Mapping[str, tuple[Any, ...]]

    def __post_init__(self) -> None:
        known = set(knob_names())
        fixed: dict[str, tuple[Any, ...]] = {}
        for knob, values in self.choices.items():
            if knob not in known:
                raise ConfigError(f"search space: unknown knob {knob!r}; knobs: {knob_names()}")
            values = _uniq(tuple(values))
            if not values:
                raise ConfigError(f"search space: knob {knob!r} has an empty range")
            for v in values:  # each value must make a valid config on its own
                try:
                    PipelineConfig().replace(**{knob: v})
                except ConfigError as e:
                    raise ConfigError(f"search space: knob {knob!r}: {e}") from None
            fixed[knob] = values
        object.__setattr__(self, "choices", fixed)

    @classmethod
    def default(
        cls,
        *,
        cpu_count: int | None = None,
        files: int | None = None,
        batch_size: int | None = None,
        tune_batch_size: bool = False,
        tune_cache: bool = False,
        data_bytes: int | None = None,
        ram_bytes: int | None = None,
        multi_hot_format: str | None = None,
        step: Step | Callable[[Any], Any] | None = None,
        service: ServiceRead | None = None,
    ) -> SearchSpace:
        """Ranges derived from the machine, the data and the step.

        Args:
          cpu_count: Cores available to the input pipeline (default: this process's).
          files: Number of input files (caps the interleave cycle length).
          batch_size: The user's batch size (needed when ``tune_batch_size``).
          tune_batch_size: Also try half, double and four times the batch size.
          tune_cache: Also search ``cache`` (off, on), when the data fits in a quarter
            of ``ram_bytes``. Off by default: a trial's windows run past the first
            epoch on small data, so a cached config measures reads from memory, which
            a job that reads its data once (most ranking jobs) never gets; and the
            cache fills again for every fresh dataset, so its measurements depend on
            which ones were reused. Ask for it for multi-epoch training on data that
            fits in memory.
          data_bytes: Size of the data (``tune_cache`` applies only if it fits).
          ram_bytes: Machine memory (default: from ``os.sysconf``).
          multi_hot_format: The pipeline's multi-hot format; ``"dense"`` adds
            ``layout`` (``per_feature``, ``packed``: three tensors per batch instead of
            one per feature, cheaper to hand to a device) when the step takes packed
            batches (``step`` None, i.e. input only, or ``step.accepts_packed``: input
            only, simulated, tfinput's ranking model; for a model of your own that
            unpacks, add it with ``narrow(layout=["per_feature", "packed"])``). None
            (unknown) leaves the layout alone.
          step: The step measured (a `tfinput.steps.Step`): ``keras_fit`` adds
            ``steps_per_execution`` (1, 8, 32: fewer host round trips per batch,
            coarser callbacks); a step with ``feeds_device`` adds ``device_prefetch``
            (0, 2: batches copied to the device ahead of the step, at the cost of
            device memory); a step with ``feeds_sparsecore`` adds
            ``sparsecore_workers`` (1, 2, 4 and the CPU count, at most the CPU count)
            and ``sparsecore_prefetch`` (0: twice the workers, 2, 8). Other steps
            ignore them, so they are not searched.
          service: The pipeline's `tfinput.service.ServiceRead` (``Pipeline.service``):
            adds ``service_compression`` ("AUTO", None) and
            ``service_max_outstanding_requests`` (AUTOTUNE, 2, 8), and for a
            `tfinput.service.LocalFleet` ``service_workers`` (1 to its ``max_workers``).
        """
        c = max(1, cpu_count or _cpus())
        choices = _tf_data_choices(c, files or 64)
        ram = ram_bytes or _ram()
        if tune_cache and data_bytes is not None and ram and data_bytes < ram // 4:
            choices["cache"] = (False, True)
        if tune_batch_size:
            if not batch_size:
                raise ConfigError("tune_batch_size needs the current batch_size")
            choices["batch_size"] = _uniq(
                [max(1, batch_size // 2), batch_size, 2 * batch_size, 4 * batch_size]
            )
        choices.update(_feeding_choices(Step.of(step), multi_hot_format, c))
        if service is not None:
            choices["service_compression"] = ("AUTO", None)
            choices["service_max_outstanding_requests"] = SERVICE_OUTSTANDING_CHOICES
            if service.fleet is not None:
                choices["service_workers"] = tuple(range(1, service.fleet.max_workers + 1))
        return cls(choices=choices)

    @classmethod
    def for_pipeline(
        cls,
        pipeline: Measurable,
        *,
        cpu_count: int | None = None,
        batch_size: int | None = None,
        tune_batch_size: bool = False,
        tune_cache: bool = False,
        step: Step | Callable[[Any], object] | None = None,
    ) -> SearchSpace:
        """`default` with the file count and data size read from a tfinput pipeline's
        files (``tune_cache`` searches ``cache`` only when they fit in a quarter of RAM), its
        multi-hot format (``layout`` when ``dense``) and the step's feeding knobs, less the
        knobs its source ignores (`Source.ignored_knobs`: the interleave knobs of a
        wrapped dataset, the block length of pyarrow Parquet)."""
        return space_for_target(
            Target.of(pipeline, what="SearchSpace.for_pipeline"),
            cpu_count=cpu_count,
            batch_size=batch_size,
            tune_batch_size=tune_batch_size,
            tune_cache=tune_cache,
            step=step,
        )

    def fix(self, **values: Any) -> SearchSpace:
        """Pin knobs to one value each (they are then not searched)."""
        return self.narrow(**{k: (v,) for k, v in values.items()})

    def narrow(self, **values: Sequence[Any]) -> SearchSpace:
        """Replace the candidate values of some knobs."""
        return SearchSpace(choices={**self.choices, **{k: tuple(v) for k, v in values.items()}})

    def including(self, *configs: PipelineConfig) -> SearchSpace:
        """The space widened so that each searched knob also offers the value each of
        ``configs`` uses, so enqueued baselines are points of the space (and the sampler
        learns from them what was really measured)."""
        widened = dict(self.choices)
        for knob, options in self.searched.items():
            extra = []
            for config in configs:
                value = getattr(config, knob)
                value = canonical(knob, value)
                if value not in options and value not in extra:
                    extra.append(value)
            widened[knob] = options + tuple(extra)
        return SearchSpace(choices=widened)

    @property
    def searched(self) -> dict[str, tuple[Any, ...]]:
        """Knobs with more than one candidate."""
        return {k: v for k, v in self.choices.items() if len(v) > 1}

    def size(self) -> int:
        n = 1
        for v in self.choices.values():
            n *= len(v)
        return n

    def suggest(self, trial: optuna.Trial, base: PipelineConfig) -> PipelineConfig:
        """Ask an Optuna trial for one value per searched knob."""
        values = {}
        for knob, options in self.choices.items():
            if len(options) == 1:
                values[knob] = options[0]
            else:
                picked = trial.suggest_categorical(knob, [encode(v) for v in options])
                values[knob] = decode(picked)
        return base.replace(**values)

    def config(self, params: Mapping[str, Any], base: PipelineConfig) -> PipelineConfig:
        """The config a trial with ``params`` (`encode`-d, as Optuna stores them) builds:
        `suggest` without a trial. A searched knob missing from ``params`` keeps
        ``base``'s value."""
        values = {k: vs[0] for k, vs in self.choices.items() if len(vs) == 1}
        values.update({k: decode(v) for k, v in params.items() if k in self.choices})
        return base.replace(**values)

    def params(self, config: PipelineConfig) -> dict[str, object]:
        """The trial parameters that reproduce ``config`` (for enqueueing baselines).
        Knob values outside the space are left out (Optuna then samples them)."""
        out = {}
        for knob, options in self.searched.items():
            value = getattr(config, knob)
            if value not in options:
                value = canonical(knob, value)
            if value in options:
                out[knob] = encode(value)
        return out

    def contains(self, config: PipelineConfig) -> bool:
        return all(getattr(config, k) in v for k, v in self.choices.items())

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: [encode(v) for v in vs] for k, vs in self.choices.items()}


def space_for_target(
    target: Target,
    *,
    cpu_count: int | None = None,
    batch_size: int | None = None,
    tune_batch_size: bool = False,
    tune_cache: bool = False,
    step: Step | Callable[[Any], object] | None = None,
) -> SearchSpace:
    """`SearchSpace.for_pipeline` of a `Target` its entry settled (`tuners.tune`'s)."""
    source = target.source
    files = source.files() if source is not None else []
    local = [f for f in files if "://" not in f and os.path.exists(f)]
    size = sum(os.path.getsize(f) for f in local) if local and len(local) == len(files) else None
    space = SearchSpace.default(
        cpu_count=cpu_count,
        files=len(files) or None,
        batch_size=batch_size,
        tune_batch_size=tune_batch_size,
        tune_cache=tune_cache,
        data_bytes=size,
        multi_hot_format=target.multi_hot_format,
        step=step,
        service=target.service,
    )
    ignored = [k for k in (source.ignored_knobs if source else ()) if k in space.choices]
    if not ignored:
        return space
    # knobs that never change what the source does: searching them wastes trials
    return SearchSpace(choices={k: v for k, v in space.choices.items() if k not in ignored})


def pipeline_key(config: Mapping[str, Any], *, layout: str) -> str:
    """A config (`PipelineConfig.to_dict`) as one string that two configs share when
    they build the same pipeline: each knob at its `canonical` value, an unset
    ``layout`` as the pipeline's own (``layout``), JSON with the keys sorted."""
    values = {k: canonical(k, v) for k, v in config.items()}
    if values.get("layout") is None:
        values["layout"] = layout
    return json.dumps(values, sort_keys=True, default=str)


#: Configs `nearest_unmeasured` looks through before it draws at random instead.
NEAREST_LIMIT = 20_000


def nearest_unmeasured(
    space: SearchSpace,
    params: Mapping[str, Any],
    taken: Callable[[dict[str, Any]], bool],
    rng: random.Random,
) -> tuple[dict[str, Any] | None, bool]:
    """A config of ``space`` that is not ``taken``, as near ``params`` as there is (the
    fewest knobs changed; one of the nearest at random): what a trial whose proposal was
    already measured enqueues instead.

    Args:
      space: The search space.
      params: The proposal (trial parameters, `encode`-d as Optuna stores them).
      taken: Whether the config of trial parameters was measured, is being measured,
        or is enqueued.
      rng: Picks among the nearest.

    Returns:
      ``(params, exhausted)``: the config's parameters, or None; ``exhausted`` is True
      when every config of the space but ``params`` is taken too (the search can find
      nothing new).
    """
    choices = {k: [encode(v) for v in vs] for k, vs in sorted(space.searched.items())}
    base = {k: params.get(k, vs[0]) for k, vs in choices.items()}
    looked = 0
    for distance in range(1, len(choices) + 1):
        found = []
        for knobs in itertools.combinations(choices, distance):
            others = [[v for v in choices[k] if v != base[k]] for k in knobs]
            for values in itertools.product(*others):
                candidate = {**base, **dict(zip(knobs, values, strict=True))}
                looked += 1
                if not taken(candidate):
                    found.append(candidate)
                if looked >= NEAREST_LIMIT:
                    break
            if looked >= NEAREST_LIMIT:
                break
        if found:
            return rng.choice(found), False
        if looked >= NEAREST_LIMIT:  # a large space, mostly measured near here: draw
            for _ in range(200):
                candidate = {k: rng.choice(vs) for k, vs in choices.items()}
                if not taken(candidate):
                    return candidate, False
            return None, False
    return None, True


def parse_assignment(text: str) -> tuple[str, list[Any]]:
    """Parse ``knob=v1,v2`` from the command line (``autotune``, true/false, ints; for
    ``layout``: ``per_feature``, ``packed`` or ``none``)."""
    if "=" not in text:
        raise ConfigError(f"expected knob=value[,value...], got {text!r}")
    knob, _, raw = text.partition("=")
    knob = knob.strip()
    if knob not in knob_names():
        raise ConfigError(f"unknown knob {knob!r}; knobs: {knob_names()}")
    values: list[Any] = []
    for item in raw.split(","):
        item = item.strip().lower()
        if not item:
            continue
        if knob == "layout":
            if item not in (*LAYOUTS, _NONE):
                raise ConfigError(f"knob 'layout': {item!r} is not one of {[*LAYOUTS, _NONE]}")
            values.append(decode(item))
        elif item == "autotune":
            values.append(AUTOTUNE)
        elif item in ("true", "false"):
            values.append(item == "true")
        else:
            try:
                values.append(int(item))
            except ValueError:
                raise ConfigError(
                    f"knob {knob!r}: {item!r} is not an int, true/false or autotune"
                ) from None
    if not values:
        raise ConfigError(f"knob {knob!r}: empty range in {text!r}")
    return knob, values


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _ram() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None
