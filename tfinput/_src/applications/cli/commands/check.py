"""``tfinput check``: read every file through the schema and report problems per file
(with a progress bar on a terminal, a line every 10 s elsewhere:
`tfinput._src.applications.cli.console.progress_of`);
with ``--resume``, also verify on the same files that the input position saves and
restores exactly (`tfinput.resume.InputIterator`).

The resume check builds the pipeline with the user's config (``--config``: a preset or
a saved config such as ``tfinput tune``'s ``best_config.json``; default: the default
config with a batch size of 64), shuffling on, reads ``--resume-after`` batches, saves
the position, reads ``--resume-compare`` more (the uninterrupted run), restores the
saved position into a freshly built pipeline and compares its next batches with those,
element by element. Exit code 1 when the data checks or the resume check fail.

``tfinput doctor`` checks the installation instead: the versions a bug report needs
(`tfinput.doctor`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from tfinput._src.applications.cli.args import (
    DATA_SET_HELP,
    add_output_arguments,
    add_source_arguments,
    tfinput_pipeline_from_args,
)
from tfinput._src.applications.cli.console import console, progress, progress_of
from tfinput._src.applications.cli.registry import Command
from tfinput._src.core.resume import verify

#: Batch size of the data check when no ``--batch-size`` is given.
CHECK_BATCH_SIZE = 1024
#: Batch size of the resume check when neither ``--batch-size`` nor ``--config`` is given.
RESUME_BATCH_SIZE = 64


def _arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(
        p,
        help={
            "paths": "data files, globs or directories",
            **DATA_SET_HELP,
        },
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"batch size of the data check (default {CHECK_BATCH_SIZE}) and, when given, of "
        f"the resume check too (default {RESUME_BATCH_SIZE}, or the saved --config's)",
    )
    r = p.add_argument_group("resume check")
    r.add_argument(
        "--resume",
        action="store_true",
        help="also verify that the input position saves and restores exactly: save after "
        "--resume-after batches, restore into a fresh pipeline, compare the next batches "
        "with an uninterrupted run",
    )
    r.add_argument(
        "--config",
        metavar="SPEC",
        help="config of the resume check: naive, heuristic, autotune or a saved config "
        f"JSON (tfinput tune's best_config.json); presets and the default run with batch size "
        f"{RESUME_BATCH_SIZE}. Shuffling is turned on if the config has none",
    )
    r.add_argument(
        "--resume-after", type=int, default=3, help="batches read before saving (default 3)"
    )
    r.add_argument(
        "--resume-compare",
        type=int,
        default=3,
        help="batches compared after the restore (default 3)",
    )
    add_output_arguments(p)


def _check(args: argparse.Namespace) -> int:
    from tfinput._src.core.errors import ConfigError

    if args.resume_after < 1 or args.resume_compare < 1:
        raise ConfigError("--resume-after and --resume-compare must be >= 1")
    if args.config and not args.resume:
        raise ConfigError("--config is the config of the resume check: add --resume")
    pipeline = tfinput_pipeline_from_args(args, command="check")
    config, notes = _resume_config(args) if args.resume else (None, [])
    with progress_of("check", "files") as tick:
        report = pipeline.check(batch_size=args.batch_size or CHECK_BATCH_SIZE, progress=tick)
    resume: dict[str, Any] | None = None
    if args.resume:
        if report.ok:
            with progress() as bar:
                task = bar.add_task(
                    "resume check", total=args.resume_after + 2 * args.resume_compare
                )
                resume = verify(
                    pipeline,
                    config,
                    after=args.resume_after,
                    compare=args.resume_compare,
                    tick=lambda: bar.advance(task),
                )
        else:
            resume = {"ok": False, "exact": None, "error": "skipped: the data checks failed"}
        resume["notes"] = notes + resume.get("notes", [])
    ok = report.ok and (resume is None or resume["ok"])
    if args.json:
        out_json: dict[str, Any] = {
            "ok": ok,
            "records": report.records,
            "empty_files": list(report.empty_files),
            "files": [{**f.__dict__, "folded": dict(f.folded)} for f in report.files],
            "folded_ids": report.folded,
        }
        if resume is not None:
            out_json["resume"] = resume
        print(json.dumps(out_json, indent=2))
    else:
        out = console()
        for f in report.files:
            status = "[green]ok[/]" if f.error is None else f"[red]{f.error}[/]"
            out.print(f"{f.path}: {f.records:,} records  {status}")
        if report.empty_files:
            names = ", ".join(report.empty_files[:5]) + (
                ", ..." if len(report.empty_files) > 5 else ""
            )
            out.print(
                f"{len(report.empty_files)} empty file(s) skipped (0 bytes or 0 rows): {names}",
                markup=False,
                soft_wrap=True,  # one line, whatever the terminal's width
            )
        out.print(
            f"{len(report.files)} file(s), {report.records:,} records, "
            f"{len(report.problems)} with problems"
        )
        for line in _folded_lines(report.folded):
            out.print(line, markup=False, soft_wrap=True)
        if resume is not None:
            for line in _resume_lines(resume):
                out.print(line, markup=False)
    return 0 if ok else 1


def _folded_lines(folded: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Per feature whose ids ``out_of_range: "modulo"`` folded: how many, the largest."""
    lines = []
    for name, c in folded.items():
        negative = f", {c['negative']:,} of them negative" if c["negative"] else ""
        lines.append(
            f"feature {name}: {c['ids']:,} id(s) outside its table [0, "
            f"{c['vocabulary_size']:,}){negative}, folded onto other ids by "
            f'out_of_range: "modulo"; largest id {c["largest"]:,}'
        )
    if lines:
        lines.append(
            "folded ids share embedding rows with the ids they fold onto: raise the "
            "tables' vocabulary_size to keep them apart (tfinput schema infer on all the "
            'data), or set out_of_range: "error" to stop on them'
        )
    return lines


# ----------------------------------------------------------------- resume
def _resume_config(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The config the resume check runs with, and notes on what was changed in it."""
    from tfinput._src.core.config import PipelineConfig

    if args.config:
        from tfinput._src.measurement.compare import load_configs

        # A preset gets the check's small batch size; a saved config keeps its own;
        # --batch-size, when given, sets either.
        preset = args.config in ("naive", "heuristic", "autotune")
        batch_size = args.batch_size or (RESUME_BATCH_SIZE if preset else None)
        (config,) = load_configs([args.config], batch_size=batch_size).values()
    else:
        config = PipelineConfig(batch_size=args.batch_size or RESUME_BATCH_SIZE)
    notes = []
    if not config.shuffle_buffer:
        buffer = max(1000, 2 * config.batch_size)
        config = config.replace(shuffle_buffer=buffer)
        notes.append(f"the config does not shuffle: checked with shuffle_buffer={buffer}")
    if config.deterministic is False:
        config = config.replace(deterministic=True)
        notes.append(
            "the config has deterministic=False: tf.data saves and restores it without "
            "losing or repeating examples, but the order after a restore differs from an "
            "uninterrupted run, so it was checked with deterministic=True"
        )
    return config, notes


def _resume_lines(resume: Mapping[str, Any]) -> list[str]:
    """The resume check as text lines."""
    lines = [f"resume: note: {n}" for n in resume.get("notes", [])]
    if "state_bytes" in resume:
        saved = (
            f"resume: saved after {resume['after']} batch(es) of {resume['batch_size']}: "
            f"state {resume['state_bytes']:,} bytes, save {resume['save_ms']:,.0f} ms"
        )
        if "restore_ms" in resume:
            saved += f", restore {resume['restore_ms']:,.0f} ms"
        lines.append(saved)
    if resume["ok"]:
        lines.append(
            f"resume: exact ({resume['compared']} batch(es) after the restore identical to "
            "the uninterrupted run, element by element)"
        )
    else:
        lines.append(f"resume: FAILED: {resume['error']}")
    return lines


CHECK_COMMAND = Command(
    name="check",
    help="read every file through the schema and report problems per file; --resume: "
    "verify that the input position saves and restores exactly",
    arguments=_arguments,
    run=_check,
)


def _doctor(args: argparse.Namespace) -> int:
    from tfinput._src.applications.doctor import report

    rep = report()
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print("\n".join(rep.lines()))
    return 0


DOCTOR_COMMAND = Command(
    name="doctor",
    help="versions of TensorFlow, Keras (and backend), numpy, pyarrow, optuna, Python "
    "and the optional parts: paste it into a bug report",
    arguments=add_output_arguments,
    run=_doctor,
)
