"""Finding the trace files of one profile run in a log directory (`find_trace`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from profiles._errors import ProfileError
from profiles._xplane import host_name_of

__all__ = ["HOW_TO_CAPTURE", "TraceRun", "find_trace"]

#: How to get a trace, appended to messages about a missing or unreadable one.
HOW_TO_CAPTURE = (
    "Capture one with `tfinput profile --logdir DIR ...` or profiles.capture(), or with "
    "tf.profiler.experimental.start(DIR) ... stop() around marked steps."
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceRun:
    """The trace files of one profile run.

    Attributes:
      logdir: The directory given by the user.
      run: The run's name (its directory relative to ``logdir``).
      run_dir: Directory holding the ``.xplane.pb`` files.
      hosts: Host names (from the file names), sorted.
      paths: One ``.xplane.pb`` per host, in ``hosts`` order.
      other_runs: Other runs found under ``logdir`` (not analysed).
    """

    logdir: Path
    run: str
    run_dir: Path
    hosts: tuple[str, ...]
    paths: tuple[Path, ...]
    other_runs: tuple[str, ...] = ()


def _runs_under(root: Path) -> dict[Path, list[Path]]:
    """Run directory -> its trace files; a run inside another run's directory (the JAX
    trace a capture keeps in ``<run>/jax/``) belongs to that run, not a run of its own."""
    runs: dict[Path, list[Path]] = {}
    for path in sorted(root.rglob("*.xplane.pb")):
        if path.is_file():
            runs.setdefault(path.parent, []).append(path)
    return {
        run: paths for run, paths in runs.items() if not any(other in run.parents for other in runs)
    }


def find_trace(
    logdir: str | os.PathLike[str], *, run: str | None = None, host: str | None = None
) -> TraceRun:
    """Locate the trace files of one profile run.

    ``logdir`` may be a TensorBoard log directory (``logdir/plugins/profile/<run>/``,
    at any depth), a run directory, or one ``.xplane.pb`` file.

    Args:
      logdir: Where to look.
      run: Run to pick when there are several (name, relative path, or its last
        part); default: the newest.
      host: Only this host's file (default: every host of the run).

    Raises:
      ProfileError: Nothing usable found; the message says what was looked for.
    """
    root = Path(logdir)
    if not root.exists():
        raise ProfileError(f"{root} does not exist. {HOW_TO_CAPTURE}")
    if root.is_file():
        if not root.name.endswith(".xplane.pb"):
            raise ProfileError(
                f"{root} is not a profiler trace: expected a <host>.xplane.pb file or a "
                f"log directory. {HOW_TO_CAPTURE}"
            )
        runs = {root.parent: [root]}
        base = root.parent
    else:
        runs = _runs_under(root)
        base = root
    if not runs:
        others = sorted({p.suffix for p in root.rglob("*") if p.is_file()}) if root.is_dir() else []
        extra = ""
        if any(p.name.endswith(".xplane.riegeli") for p in root.rglob("*")):
            extra = " (found .xplane.riegeli files: only .xplane.pb is supported)"
        raise ProfileError(
            f"no profiler trace (*.xplane.pb) under {root}{extra}; files there have "
            f"suffixes {others or 'none'}. {HOW_TO_CAPTURE}"
        )

    def name_of(run_dir: Path) -> str:
        try:
            rel = run_dir.relative_to(base).as_posix()
        except ValueError:
            rel = run_dir.name
        return run_dir.name if rel in ("", ".") else rel

    names = {name_of(d): d for d in runs}
    if run is not None:
        matches = [n for n in names if run in (n, Path(n).name) or n.endswith("/" + run)]
        if not matches:
            raise ProfileError(f"no profile run {run!r} under {root}; runs: {sorted(names)}")
        chosen = matches[0]
    else:
        # Newest run: the one whose trace files were written last.
        chosen = max(names, key=lambda n: (max(p.stat().st_mtime for p in runs[names[n]]), n))
    run_dir = names[chosen]
    files = sorted(runs[run_dir])

    hosts = [host_name_of(p) for p in files]
    if host is not None:
        if host not in hosts:
            raise ProfileError(f"no host {host!r} in run {chosen}; hosts: {hosts}")
        files = [files[hosts.index(host)]]
        hosts = [host]
    return TraceRun(
        logdir=root,
        run=chosen,
        run_dir=run_dir,
        hosts=tuple(hosts),
        paths=tuple(files),
        other_runs=tuple(sorted(n for n in names if n != chosen)),
    )
