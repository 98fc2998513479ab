"""The built-in default data set: what ``tfinput demo`` (and ``tune --demo``) tunes and
``tfinput profile --demo`` profiles, with no user data needed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["DEMO", "demo_pipeline"]

#: The built-in default the README's main job runs: small enough to finish in a few
#: minutes on 2 cores, big enough that the input pipeline matters.
DEMO = {
    "rows": 200_000,
    "files": 8,
    "batch_size": 4096,
    "vocabulary_size": 10_000,
    "dim": 8,
    "n_trials": 14,
    "windows": 3,
    "window_batches": 8,
    "window_seconds": 0.5,
    "warmup_batches": 3,
    "confirm_top": 2,
    "confirm_windows": 3,
}


def demo_pipeline(
    data_dir: str | os.PathLike[str] | None = None, *, rows: int = DEMO["rows"], say: Any = None
) -> Any:
    """The demo pipeline: criteo-like TFRecord data (13 dense, 26 single ids, 4
    multi-hot lists), generated once into ``data_dir`` (default
    ``$TFINPUT_DATA_DIR`` or ``~/.cache/tfinput``) and reused."""
    from tfinput._src.applications import testing
    from tfinput._src.core.pipeline import tfrecord

    schema = testing.criteo_like_schema(vocabulary_size=DEMO["vocabulary_size"], dim=DEMO["dim"])
    root = Path(
        data_dir or os.environ.get("TFINPUT_DATA_DIR") or Path.home() / ".cache" / "tfinput"
    )
    directory = root / f"demo-criteo-like-{rows}-v1"
    done = directory / "_COMPLETE"
    if not done.exists():
        if say:
            say(f"generating {rows:,} criteo-like rows into {directory} (once)")
        testing.write_tfrecord(directory, schema, rows=rows, files=DEMO["files"], seed=0)
        schema.to_json(directory / "schema.json")
        done.write_text("ok\n")
    files = sorted(str(p) for p in directory.glob("part-*.tfrecord"))
    return tfrecord(files, schema)
