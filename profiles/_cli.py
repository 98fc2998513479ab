"""The ``tfinput profile`` and ``tfinput inspect`` commands.

Registered by `tfinput._src.applications.cli.registry` (which imports this module only to build the
parser); the shared pieces come from `tfinput.cli`. Exit codes, as the other ``tfinput``
commands: 0 for a complete analysis; 1 when a report was printed but the trace lacks
something essential (no step markers, no tf.data events: the diagnostics say how to
capture it); 2 for bad usage or input that cannot be analysed at all (no trace,
truncated or foreign file, pipeline that runs out), with a message on stderr and never
a traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tfinput._src.applications.cli.args import (
    add_output_arguments,
    add_step_arguments,
    check_output,
    takes_config,
)
from tfinput._src.applications.cli.console import console
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.options import load_object
from tfinput.errors import ConfigError

if TYPE_CHECKING:
    from tfinput.config import PipelineConfig
    from tfinput.schema import Schema


# ---------------------------------------------------------------- arguments
def _profile_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--pipeline",
        metavar="MODULE:FUNCTION",
        help="callable returning a tf.data.Dataset, an object with .build(config) or an "
        "iterator of batches (a SparseCore feed) "
        "(MODULE may be a dotted module or a path to a .py file)",
    )
    source.add_argument("--demo", action="store_true", help="profile the built-in demo pipeline")
    p.add_argument("--config", metavar="PATH", help="PipelineConfig JSON passed to the pipeline")
    p.add_argument("--logdir", default="runs/profile", help="log directory (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="profiled steps (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps (default: %(default)s)")
    add_step_arguments(
        p,
        help={
            "step": "training step kind: input_only, ranking / ranking_fit (built-in model "
            "with train_on_batch / model.fit), keras / keras_fit (--model), jax (--step-fn), "
            "function (--step-fn), simulated (--device-time-ms); the Keras backend is "
            "KERAS_BACKEND's",
            "device_time_ms": "device time per batch of the simulated step (with --step simulated)",
            "model": "callable returning a compiled Keras model (with --step keras or "
            "keras_fit; default: the built-in ranking model for tfinput pipelines, a tiny "
            "dense model otherwise)",
            "step_fn": "step(batch) (--step function), or a function returning (step_fn, "
            "initial_state) for a JAX step(state, batch) -> state (--step jax)",
        },
        device_time_ms={"default": None, "metavar": "X"},
    )
    p.add_argument("--no-analyze", action="store_true", help="only capture the trace")
    add_output_arguments(p, json_help="print JSON instead of a report", html=True)


def _inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logdir", nargs="?", metavar="LOGDIR", help="log directory, run or file")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("LOGDIR_A", "LOGDIR_B"),
        help="show two runs side by side (before, after)",
    )
    p.add_argument("--run", help="profile run to analyse when LOGDIR holds several")
    p.add_argument("--host", help="analyse only this host")
    p.add_argument("--top", type=int, default=8, help="stages shown (default: %(default)s)")
    add_output_arguments(p, json_help="print JSON instead of a report", html=True)


# ------------------------------------------------------------------ resolution
def resolve_pipeline(
    spec: str, config: PipelineConfig | None = None, *, with_schema: bool = False
) -> Any:
    """Build the dataset named by ``--pipeline MODULE:FUNCTION``.

    The object may be a ``tf.data.Dataset``, an object with ``.build(config)`` (a
    `tfinput.Pipeline`, built with ``--config`` and repeated), or a callable returning
    either, or returning an iterator of batches (a `tfinput.sparsecore.sparsecore_feed`
    over a built pipeline, `tfinput.device_prefetch.to_jax` over that: their stages are
    in the JAX trace of ``--step jax``). Its signature decides how a callable is called,
    as for ``tune`` and ``bench`` (`tfinput._src.applications.cli.args.takes_config`): one taking an
    argument receives the `PipelineConfig` (``--config``, or the default config), a
    zero-argument one is called as is. With ``with_schema`` returns ``(dataset,
    schema)``, the schema being the pipeline's (None for a plain dataset).

    Raises:
      ConfigError: The object cannot be found, needs arguments tfinput cannot give, or
        does not give a dataset.
    """
    obj = load_object(spec, "--pipeline")

    def default_config() -> Any:
        if config is not None:
            return config
        from tfinput.config import PipelineConfig

        return PipelineConfig()

    import tensorflow as tf

    from tfinput._src.measurement.target import Target
    from tfinput.config import Buildable

    def built(buildable: Buildable) -> tuple[Any, Any]:
        """``(its repeated dataset, its schema)``: the target settled once."""
        return buildable.build(default_config()).repeat(), Target.of(buildable).schema

    schema = None
    if isinstance(obj, Buildable) and not isinstance(obj, type):
        obj, schema = built(obj)
    elif callable(obj) and not isinstance(obj, tf.data.Dataset):
        if takes_config(obj, spec):
            obj = obj(default_config())
        elif config is not None:
            raise ConfigError(
                f"--config was given but {spec} takes no argument to receive it; make it "
                "accept a PipelineConfig"
            )
        else:
            obj = obj()
        if isinstance(obj, Buildable) and not isinstance(obj, tf.data.Dataset):
            obj, schema = built(obj)
    elif config is not None:
        raise ConfigError(f"--config was given but {spec} is a dataset, not a factory")
    if not isinstance(obj, (tf.data.Dataset, Iterator)):
        raise ConfigError(
            f"--pipeline {spec}: expected a tf.data.Dataset, an object with .build(config) "
            f"or an iterator of batches, got {type(obj).__name__}"
        )
    return (obj, schema) if with_schema else obj


def _make_step(args: argparse.Namespace, dataset: Iterable[object], schema: Schema | None) -> Any:
    """The step kinds of the tuner (`tfinput.steps.make`); ``--step keras`` without
    ``--model`` uses the built-in ranking model for tfinput pipelines and a tiny dense
    model for any other dataset."""
    from tfinput import steps

    if args.step in ("keras", "keras_fit") and not args.model:
        fit = args.step == "keras_fit"
        if schema is not None:
            return steps.make("ranking_fit" if fit else "ranking", schema=schema)
        from profiles._testing import demo_keras_model

        model = demo_keras_model(dataset.element_spec)
        return steps.keras_fit_step(model) if fit else steps.keras_step(model)
    return steps.make(
        args.step,
        schema=schema,
        model=args.model,
        step_fn=args.step_fn,
        device_time_ms=args.device_time_ms,
    )


# -------------------------------------------------------------------- output
def _console() -> Any:
    """The report's console: piped output as wide as the terminal says (at least 120)."""
    width = max(shutil.get_terminal_size((140, 24)).columns, 120)
    return console(piped_width=width, highlight=True)


def _emit(obj: Any, args: argparse.Namespace) -> None:
    from profiles import _report as report
    from profiles._html import write_html
    from profiles._results import Comparison

    if args.json:
        print(report.to_json(obj))
    elif isinstance(obj, Comparison):
        report.render_comparison(obj, _console())
    else:
        report.render(obj, _console(), top=getattr(args, "top", 8))
    if args.html:
        path = write_html(obj, args.html)
        print(f"HTML report written to {path}", file=sys.stderr if args.json else sys.stdout)


# ---------------------------------------------------------------- commands
def _check_step_options(args: argparse.Namespace) -> None:
    """The step options ``tfinput profile`` accepts together.

    Raises:
      ConfigError: An option that does not apply to ``--step``, or a missing one.
    """
    if args.step == "simulated" and (args.device_time_ms is None or args.device_time_ms <= 0):
        raise ConfigError("--step simulated needs --device-time-ms X (X > 0)")
    if args.device_time_ms is not None and args.step != "simulated":
        raise ConfigError("--device-time-ms only applies to --step simulated")
    if args.model and args.step not in ("keras", "keras_fit"):
        raise ConfigError("--model only applies to --step keras or keras_fit")
    if args.step_fn and args.step not in ("function", "jax"):
        raise ConfigError("--step-fn only applies to --step function or jax")


def _dataset(args: argparse.Namespace, config: PipelineConfig | None) -> tuple[Any, Any]:
    """``(dataset, schema)`` of ``--demo`` or ``--pipeline``, built with ``config``."""
    if not args.demo:
        return resolve_pipeline(args.pipeline, config, with_schema=True)
    from tfinput._src.applications.cli.args import DEMO, demo_pipeline
    from tfinput.config import PipelineConfig

    pipeline = demo_pipeline()
    dataset = pipeline.build(config or PipelineConfig(batch_size=DEMO["batch_size"]))
    return dataset.repeat(), pipeline.schema


def _profile(args: argparse.Namespace) -> int:
    """Run ``tfinput profile``: capture, then analyse and report."""
    _check_step_options(args)
    check_output(args.logdir, "--logdir", directory=True)
    check_output(args.html, "--html", directory=False)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from profiles._analysis import analyze
    from profiles._capture import CaptureConfig, capture

    cfg = CaptureConfig(steps=args.steps, warmup=args.warmup)
    config = None
    if args.config:
        from tfinput.config import PipelineConfig

        config = PipelineConfig.from_json(args.config)
    dataset, schema = _dataset(args, config)
    step = _make_step(args, dataset, schema)
    if config is not None and step.kind == "keras_fit":
        step = step.prepare(config)  # the config's steps_per_execution
    result = capture(dataset, step, logdir=args.logdir, config=cfg)
    print(
        f"profile written to {result.run_dir} (open with: tensorboard --logdir {result.logdir})",
        file=sys.stderr if args.json else sys.stdout,
    )
    if args.no_analyze:
        return 0
    analysis = analyze(result.logdir, run=result.run_dir.name)
    _emit(analysis, args)
    return 0 if analysis.is_complete else 1


def _inspect_logdirs(args: argparse.Namespace) -> int:
    """Run ``tfinput inspect``: analyse (or compare) log directories."""
    check_output(args.html, "--html", directory=False)
    if args.compare and args.logdir:
        raise ConfigError("give either LOGDIR or --compare LOGDIR_A LOGDIR_B, not both")
    if not args.compare and not args.logdir:
        raise ConfigError("give a LOGDIR to analyse, or --compare LOGDIR_A LOGDIR_B")
    if args.compare and args.run:
        raise ConfigError("--run does not apply to --compare: give the two run directories")
    if args.top < 1:
        raise ConfigError(f"--top must be >= 1, got {args.top}")
    from profiles._analysis import analyze, compare

    if args.compare:
        before, after = (analyze(d, host=args.host) for d in args.compare)
        _emit(compare(before, after), args)
        return 0 if before.is_complete and after.is_complete else 1
    analysis = analyze(args.logdir, run=args.run, host=args.host)
    _emit(analysis, args)
    return 0 if analysis.is_complete else 1


PROFILE_COMMAND = Command(
    name="profile",
    help="profile a pipeline feeding a training step and find its bottleneck",
    description=(
        "Run a pipeline with a training step for a warm-up, profile N marked steps, "
        "write a TensorBoard profile log directory and analyse it."
    ),
    arguments=_profile_arguments,
    run=_profile,
    error_names_command=True,
)

INSPECT_COMMAND = Command(
    name="inspect",
    help="analyse a profile log directory (step breakdown, input wait, stages)",
    description=(
        "Read the .xplane.pb traces of a log directory with xprof's offline "
        "converters, rebuild the tf.data stages and name the bottleneck."
    ),
    arguments=_inspect_arguments,
    run=_inspect_logdirs,
    error_names_command=True,
)


def run_profile(args: argparse.Namespace) -> int:
    """Handler of ``tfinput profile``: capture, then analyse and report; returns the
    exit code (errors on one line of stderr)."""
    return PROFILE_COMMAND(args)


def run_inspect(args: argparse.Namespace) -> int:
    """Handler of ``tfinput inspect``: analyse (or compare) log directories; returns
    the exit code (errors on one line of stderr)."""
    return INSPECT_COMMAND(args)


def add_subcommands(subparsers: Any) -> None:
    """Register ``profile`` and ``inspect`` on an argparse subparsers object (the
    ``tfinput`` parser has them already: `tfinput._src.applications.cli.registry.COMMANDS`).

    Args:
      subparsers: What ``ArgumentParser.add_subparsers()`` returned. Each subcommand
        sets ``func`` (``args -> exit code``) with ``set_defaults``.
    """
    for command in (PROFILE_COMMAND, INSPECT_COMMAND):
        command.register(subparsers)
