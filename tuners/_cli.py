"""``tfinput tune`` and ``tfinput demo``: thin commands over `tuners.tune`.

Registered by `tfinput._src.applications.cli.registry` (which imports this module only to build the
parser); the shared pieces come from `tfinput.cli` (argument groups, the arguments to
pipeline function, the console, the demo data). Exit codes: 0 done (also when the
confirmation failed twice: the search's best config is written, marked unconfirmed, with
a warning); 2 bad usage or input (unknown knob, empty range, unreachable storage, missing
files, a step or pipeline that fails on every config...), reported on one line of
stderr; 130 after Ctrl-C. Nonsensical values (``--timeout`` of 0 or less, ``--batch-size
0``, ``--confirm-top 0``, ``--window-seconds`` whose least trial does not fit in
``--timeout``...) are refused before anything else, and an ``--out`` folder whose disk
cannot hold the outputs before the study. ``result.json`` is written whenever trials
ran, with every trial's state and error: after Ctrl-C too, marked interrupted, with no
verdict, and the last line says where it is and how to keep trials to resume
(``--storage``); a second Ctrl-C while it is written stops at once; a SQLite study
locked by another writer ends in one line naming the database, with the trials known
in ``result.json``. Every output is written whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfinput import steps
from tfinput._src.applications.cli.args import (
    DEMO,
    add_output_arguments,
    add_source_arguments,
    add_step_arguments,
    check_output,
    demo_pipeline,
    find_schema,
    pipeline_from_args,
)
from tfinput._src.applications.cli.console import console, progress, say
from tfinput._src.applications.cli.registry import Command, forgive_interrupted_teardown
from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput.errors import ConfigError
from tuners._cli_checks import check_arguments, check_free_space
from tuners._options import ConfirmOptions, SearchOptions, StudyOptions, TuneOptions

if TYPE_CHECKING:
    from tfinput._src.measurement.target import Measurable
    from tfinput.config import PipelineConfig
    from tfinput.steps import Step
    from tuners._result import TuneInterrupted, TuneResult
    from tuners._space import SearchSpace

#: The exit code after Ctrl-C (the trials done written first), as for every command.
INTERRUPTED = 130


# ---------------------------------------------------------------- arguments
def _tune_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p.add_argument_group("pipeline (one of)"),
        help={
            "paths": "data files, globs or directories (with --schema)",
            "schema": "schema JSON for PATHS (default: schema.json beside them)",
            "format": None,
            "pipeline": "callable returning a tfinput.Pipeline",
            "demo": "the built-in criteo-like data",
            "service": "read through tf.data service: a dispatcher address, or local:N to "
            "start up to N worker processes here and search 1 to N workers",
            "service_workers": "the worker count of the --service address",
        },
        paths={"nargs": "*"},
    )
    add_step_arguments(
        p.add_argument_group("step"),
        help={
            "step": "input_only, ranking / ranking_fit (built-in DCN-style Keras model trained "
            "with train_on_batch / model.fit), keras / keras_fit (--model), jax (--step-fn "
            "returning (step_fn, initial_state)), function (--step-fn), simulated "
            "(--device-time-ms); the Keras backend is KERAS_BACKEND's and is recorded in "
            "the result",
            "model": "callable(schema or nothing) returning a compiled Keras model (keras, "
            "keras_fit)",
            "step_fn": "callable step(batch) (function), or callable(schema or nothing) "
            "returning (step_fn(state, batch) -> state, initial_state) (jax)",
            "device_time_ms": "simulated device time per batch",
        },
    )
    _search_arguments(p)


def _skip_arguments(p: Any) -> None:
    """``--no-breakdown`` and ``--no-format-advice``: the two measurements after the
    confirmation that a quick run may leave out (tune and demo)."""
    p.add_argument(
        "--no-breakdown",
        action="store_true",
        help="skip the gain by knob (the winner re-measured with each differing knob "
        "group reverted to autotune)",
    )
    p.add_argument(
        "--no-format-advice",
        action="store_true",
        help="skip converting a tf.Example sample to columnar records when parsing is "
        "the bound (a few seconds to a minute)",
    )


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="output directory (default: %(default)s)")
    p.add_argument(
        "--data-dir",
        help="where the demo data are generated (default: $TFINPUT_DATA_DIR or ~/.cache/tfinput)",
    )
    p.add_argument("--n-trials", type=int, default=DEMO["n_trials"])
    add_step_arguments(
        p,
        help={"step": None, "device_time_ms": None},
        step={"choices": ["ranking", "input_only", "simulated"], "default": "ranking"},
        device_time_ms={"default": 20.0},
    )
    _skip_arguments(p)
    add_output_arguments(p)


def _search_arguments(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("search")
    s.add_argument("--n-trials", type=int, default=30)
    s.add_argument(
        "--timeout",
        type=float,
        help="seconds the whole run may take: the search keeps the time the confirmation "
        "needs, and the run ends within the timeout plus one window",
    )
    s.add_argument("--storage", help="postgresql:// or sqlite:/// URL, or a .db / .log file")
    s.add_argument("--study-name", help="study name in the storage (required with --storage)")
    s.add_argument(
        "--no-resume", action="store_true", help="fail if the study exists instead of resuming it"
    )
    s.add_argument("--heartbeat-interval", type=int, default=5, help=argparse.SUPPRESS)
    s.add_argument("--grace-period", type=int, default=15, help=argparse.SUPPRESS)
    s.add_argument("--batch-size", type=int, default=None, help="global batch size")
    s.add_argument("--current", metavar="CONFIG.json", help="your current config (a baseline)")
    s.add_argument(
        "--fix", action="append", default=[], metavar="KNOB=VALUE", help="pin a knob (repeatable)"
    )
    s.add_argument(
        "--narrow",
        action="append",
        default=[],
        metavar="KNOB=V1,V2",
        help="candidate values of a knob (repeatable)",
    )
    s.add_argument(
        "--tune-batch-size",
        action="store_true",
        help="also search the batch size (prints learning-rate advice)",
    )
    s.add_argument(
        "--tune-cache",
        action="store_true",
        help="also search cache=true when the files fit in a quarter of RAM (for "
        "multi-epoch training: the trials then measure epochs read from memory)",
    )
    s.add_argument(
        "--target-rate",
        type=float,
        metavar="EXAMPLES_PER_S",
        help="with --service: say how many workers this rate needs",
    )
    s.add_argument("--windows", type=int, default=5)
    s.add_argument(
        "--window-seconds",
        type=float,
        help="least seconds of each window (trials, confirmation, step bound), its "
        "batches sized from the warm-up's rate (default 0.5; 0: a fixed --window-batches)",
    )
    s.add_argument(
        "--window-batches",
        type=int,
        help="least batches per window (default 20); given without --window-seconds, "
        "the fixed count of every window",
    )
    s.add_argument("--warmup-batches", type=int, default=5)
    s.add_argument("--confirm-top", type=int, default=3)
    s.add_argument("--confirm-windows", type=int, default=5)
    s.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the sampler's seed (default: drawn per process and recorded in result.json; "
        "leave it out for workers sharing a study)",
    )
    _skip_arguments(s)
    s.add_argument("--out", help="output directory (default: runs/tune-<time>)")
    add_output_arguments(s, json_help="print the result as JSON")


# ----------------------------------------------------------------- helpers
def _schema_path(args: argparse.Namespace) -> str | None:
    """The schema file of a PATHS pipeline, for the format advice's command."""
    if args.schema or not args.paths:
        return args.schema
    try:
        return find_schema(args.paths)
    except ConfigError:
        return None


def _space_and_base(
    args: argparse.Namespace,
    pipeline: Measurable,
    step: Step | Callable[[Any], object] | None = None,
) -> tuple[Any, Any, Any]:
    from tfinput._src.measurement.probes import available_cpus
    from tfinput.config import PipelineConfig
    from tuners._space import SearchSpace, parse_assignment

    current = PipelineConfig.from_json(args.current) if args.current else None
    base = current or PipelineConfig()
    if args.batch_size is not None:
        base = base.replace(batch_size=args.batch_size)
    space = SearchSpace.for_pipeline(
        pipeline,
        cpu_count=available_cpus(),
        batch_size=base.batch_size,
        tune_batch_size=args.tune_batch_size,
        tune_cache=args.tune_cache,
        step=step,
    )
    for text in args.narrow:
        knob, values = parse_assignment(text)
        space = space.narrow(**{knob: values})
    for text in args.fix:
        knob, values = parse_assignment(text)
        if len(values) != 1:
            raise ConfigError(f"--fix {text}: give one value (use --narrow for several)")
        space = space.fix(**{knob: values[0]})
    return space, base, current


class _Display:
    """Progress bar over trials, then over confirmation windows."""

    def __init__(self, total: int) -> None:
        self.bar = progress()
        self.total = total
        self.task = None
        self.confirm_task = None

    def __enter__(self) -> _Display:
        self.bar.__enter__()
        self.task = self.bar.add_task("tuning", total=self.total)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, event: str, info: dict[str, object]) -> None:
        # Here, not at the top: the module of a trial imports Optuna, which the parser
        # (`tfinput --help`, every other command) must not load.
        from tuners._progress import stage_line, trial_line

        if event == "trial":
            best = f"best {info['best']:,.0f}/s" if info.get("best") else ""
            label = info.get("baseline") or f"trial {info['number']}"
            self.bar.update(
                self.task,
                completed=min(info["done"], self.total),
                description=f"tuning ({label}: {info['state']}) {best}",
            )
            if not self.bar.disable:
                return
            say(trial_line(info, self.total))
            return
        if event == "confirm":
            self.confirm_task = self.bar.add_task(
                "confirming against autotune", total=len(info["configs"]) * info["windows"]
            )
        elif event == "confirm_window":
            self.bar.update(self.confirm_task, completed=info["done"])
            return
        line = stage_line(event, info)
        if line is None:
            return
        if event == "slow_trial" and not self.bar.disable:
            self.bar.console.print(line, markup=False)
        elif self.bar.disable:
            say(line)


def _finish(result: TuneResult, args: argparse.Namespace, out: str) -> int:
    from tuners._report import (
        NO_PLOTLY,
        has_plotly,
        print_summary,
        saved_config_line,
        write_outputs,
    )

    paths = write_outputs(result, out)
    if not has_plotly():
        print(f"tfinput: report.html has no charts ({NO_PLOTLY})", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {**result.to_dict(), "outputs": {k: str(v) for k, v in paths.items()}},
                indent=2,
                default=str,
            )
        )
        return 0
    c = console()
    print_summary(result, c)
    c.print(
        f"best config: {paths['best_config']}  (PipelineConfig.from_json(...) → "
        "pipeline.build(config))"
    )
    kept = saved_config_line(result, str(paths["best_config"]), str(paths["result"]))
    if kept is not None:
        c.print(kept, markup=False)
    c.print(f"report: {paths['report']}   details: {paths['result']}")
    c.print(_resume_line(result, str(paths["best_config"])), markup=False)
    return 0


def _resume_line(result: TuneResult, best_config: str) -> str:
    """Whether the best config resumes exactly after a restart (`tuners._result.
    resume_record`, saved in ``best_config.json``), and how to verify it on the data."""
    record = result.record()["resume"]
    verify = f"tfinput check DATA --resume --config {best_config}"
    if record["exact"]:
        head = "resume: the best config resumes exactly after a restart"
    else:
        head = f"resume: not exact after a restart: {'; '.join(record['reasons'])}"
    notes = "".join(f"; {n}" for n in record["notes"])
    return f"{head}{notes} (verify on your files: {verify})"


def _write_failed(error: Any, out: str) -> None:
    """``result.json`` for a search in which no trial completed: the error and every
    trial (nothing when the study could not be opened)."""
    from tuners._result import write_whole
    from tuners._trials import summarize_trials

    if error.study is None:
        return
    data = {
        "format": "tfinput.tune/1",
        "error": str(error),
        "best_config": None,
        "trials_detail": summarize_trials(error.study),
    }
    path = write_whole(Path(out) / "result.json", json.dumps(data, indent=2, default=str) + "\n")
    say(f"tfinput tune: trials written to {path}")


def _locked(error: Any, out: str) -> ConfigError:
    """The one line for a study whose database another writer holds: the database,
    the lock, where the trials known are written, and how to resume."""
    from tuners._result import TuneOutputError

    done = f"{error.completed} completed trial{'s' if error.completed != 1 else ''}"
    try:
        where = f"the {done} this run knows of are in {error.write(out)}"
    except TuneOutputError as e:
        where = f"the {done} this run knows of could not be written ({e})"
    return ConfigError(
        f"{error}; {where}; run the same command again once the other writer is done, to "
        "resume the study"
    )


def _write_interrupted(interrupt: TuneInterrupted, args: argparse.Namespace, out: str) -> None:
    """After Ctrl-C: ``result.json`` with the completed trials (marked interrupted, no
    verdict), then, as the last line, where they are and how to keep trials to resume. A
    second Ctrl-C meanwhile stops at once (``tfinput: interrupted``)."""
    # Plain lines, never wrapped: the last one is what the user reads after Ctrl-C.
    try:
        say(f"tfinput tune: {interrupt.describe()}")
        where = f"the trials are in {interrupt.write(out)}"
    except OSError as e:
        where = f"the trials could not be written to {out} ({e.strerror or e})"
    except Exception as e:  # the storage failed (Ctrl-C landed inside a write to it)
        where = f"the trials could not be read back from the study ({type(e).__name__}: {e})"
    storage = getattr(args, "storage", None)
    if storage:
        keep = (
            f"the study {interrupt.study.study_name!r} keeps them in {storage}: run the same "
            "command again to resume it"
        )
    else:
        keep = (
            f"to keep trials and resume after an interrupt, run with --storage {out}/study.db "
            "--study-name NAME (the same command then resumes the study)"
        )
    say(f"tfinput tune: {where}; {keep}")


def _search(
    args: argparse.Namespace,
    out: str,
    pipeline: Measurable,
    *,
    step: Step,
    space: SearchSpace,
    base: PipelineConfig,
    current: PipelineConfig | None = None,
    timeout: float | None = None,
    options: TuneOptions,
) -> TuneResult | None:
    """`tuners.tune` under the progress display (``--n-trials`` trials, within
    ``--timeout``); when no trial completed, ``result.json`` is written before the error
    goes on. Ctrl-C: the trials done are written (`_write_interrupted`) and None is
    returned (exit code 130)."""
    from tuners._result import StudyLockedError, TrialsFailedError, TuneInterrupted
    from tuners._study import tune

    try:
        with _Display(args.n_trials) as display:
            return tune(
                pipeline,
                step=step,
                space=space,
                base=base,
                current=current,
                n_trials=args.n_trials,
                timeout=timeout,
                options=options,
                progress=display,
                verbose=False,
            )
    except TrialsFailedError as e:
        _write_failed(e, out)
        raise
    except StudyLockedError as e:
        raise _locked(e, out) from None
    except TuneInterrupted as e:
        forgive_interrupted_teardown()
        _write_interrupted(e, args, out)
        return None


# ---------------------------------------------------------------- commands
def _options(args: argparse.Namespace) -> TuneOptions:
    """The `TuneOptions` ``tfinput tune``'s arguments ask for (the one place they map)."""
    return TuneOptions(
        search=SearchOptions(seed=args.seed),
        study=StudyOptions(
            storage=args.storage,
            study_name=args.study_name,
            load_if_exists=not args.no_resume,
            heartbeat_interval=args.heartbeat_interval,
            grace_period=args.grace_period,
        ),
        measurement=MeasureOptions(
            windows=args.windows,
            window_batches=args.window_batches,
            window_seconds=args.window_seconds,
            warmup_batches=args.warmup_batches,
        ),
        confirmation=ConfirmOptions(
            confirm_top=args.confirm_top,
            confirm_windows=args.confirm_windows,
            breakdown=not args.no_breakdown,
            advise_format=not args.no_format_advice,
            schema_path=_schema_path(args),
            target_rate=args.target_rate,
        ),
    )


def _tune(args: argparse.Namespace) -> int:
    """Run ``tfinput tune``: check the arguments, build pipeline and step, search, report."""
    check_arguments(args)
    out = args.out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}"
    check_output(out, "--out", directory=True)
    check_free_space(out)
    target = Target.of(pipeline_from_args(args, say=console(stderr=True).print), what="tune")
    step = steps.make(
        args.step,
        schema=target.schema,
        model=args.model,
        step_fn=args.step_fn,
        device_time_ms=args.device_time_ms,
    )
    space, base, current = _space_and_base(args, target, step)
    result = _search(
        args,
        out,
        target,
        step=step,
        space=space,
        base=base,
        current=current,
        timeout=args.timeout,
        options=_options(args),
    )
    if result is None:  # Ctrl-C: the trials done are written
        return INTERRUPTED
    return _finish(result, args, out)


def _demo(args: argparse.Namespace) -> int:
    """Run ``tfinput demo``: the tuner end to end on the built-in data."""
    from tfinput._src.measurement.probes import available_cpus
    from tfinput.config import PipelineConfig
    from tuners._space import SearchSpace

    check_output(args.out, "--out", directory=True)
    check_free_space(args.out)
    say = console(stderr=True).print
    t0 = time.time()
    pipeline = demo_pipeline(args.data_dir, say=say)
    step = steps.make(args.step, schema=pipeline.schema, device_time_ms=args.device_time_ms)
    base = PipelineConfig(batch_size=DEMO["batch_size"])
    space = SearchSpace.for_pipeline(pipeline, cpu_count=available_cpus(), step=step)
    say(
        f"tuning {DEMO['files']} TFRecord files ({DEMO['rows']:,} criteo-like rows, batch "
        f"{DEMO['batch_size']}) against step '{step.name}': {args.n_trials} trials, "
        "baselines first, then confirmation against autotune"
    )
    result = _search(
        args,
        args.out,
        pipeline,
        step=step,
        base=base,
        space=space,
        options=TuneOptions(
            measurement=MeasureOptions(
                windows=DEMO["windows"],
                window_batches=DEMO["window_batches"],
                window_seconds=DEMO["window_seconds"],
                warmup_batches=DEMO["warmup_batches"],
            ),
            confirmation=ConfirmOptions(
                confirm_top=DEMO["confirm_top"],
                confirm_windows=DEMO["confirm_windows"],
                breakdown=not args.no_breakdown,
                advise_format=not args.no_format_advice,
            ),
        ),
    )
    if result is None:  # Ctrl-C: the trials done are written
        return INTERRUPTED
    code = _finish(result, args, args.out)
    if not args.json:
        say(f"demo finished in {time.time() - t0:.0f} s")
    return code


TUNE_COMMAND = Command(
    name="tune",
    help="search tf.data settings against a training step and save the best config",
    description="Search prefetch, interleave, parallelism, the batch layout, "
    "steps_per_execution (keras_fit steps), device prefetch (steps that feed the "
    "device) and optionally the batch size against a real or simulated training step "
    "with Optuna; confirm the winner against autotune; say whether it beats autotune "
    "beyond the noise and whether input is the bottleneck at all; break the gain down "
    "by knob; for tf.Example data bound by parsing, measure a columnar sample; write "
    "best_config.json, result.json and report.html.",
    arguments=_tune_arguments,
    run=_tune,
    error_names_command=True,
)

DEMO_COMMAND = Command(
    name="demo",
    help="the main job on a built-in default: tune criteo-like data against a small "
    "ranking step (a few minutes)",
    arguments=_demo_arguments,
    run=_demo,
    error_names_command=True,
)


def add_subcommands(subparsers: Any) -> None:
    """Register ``tune`` and ``demo`` on an ``add_subparsers()`` object (the ``tfinput``
    parser has them already: `tfinput._src.applications.cli.registry.COMMANDS`)."""
    for command in (TUNE_COMMAND, DEMO_COMMAND):
        command.register(subparsers)
