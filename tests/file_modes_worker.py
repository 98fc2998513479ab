"""Run every tfinput command and API that writes files, once per umask given (argv[2:],
octal), into ``ROOT/umask-UUU`` (ROOT: argv[1]) with the process's umask set to UUU:
datagen, schema infer, convert (columnar, Parquet, TFRecord), bench --out, tune --out
with a SQLite study, profile --html, schema sparsecore --out, and a Keras checkpoint
with its input position. `tests/test_file_modes.py` then checks the mode of everything
written. Prints ``done`` last."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

PIPELINE = """
import tfinput
from tfinput.schema import Schema

def pipeline(config):
    return tfinput.tfrecord({files!r}, Schema.from_json({schema!r})).build(config).repeat()
"""


def cli(*argv: object) -> None:
    from tfinput.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"tfinput {' '.join(map(str, argv))} -> {code}: {err.getvalue()}")


def checkpoint(root: Path, data: Path) -> None:
    """Two saves of a `KerasInputCheckpoint` (the second replaces the first)."""
    import keras

    import tfinput
    from tfinput.config import PipelineConfig
    from tfinput.schema import Schema

    schema = Schema.from_json(data / "schema.json")
    pipeline = tfinput.tfrecord(sorted(str(p) for p in data.glob("*.tfrecord")), schema)
    it = pipeline.iterator(PipelineConfig(batch_size=32), epochs=None)
    ckpt = tfinput.resume.KerasInputCheckpoint(it, root / "ckpt", every=2)
    price = keras.Input(shape=(1,), name="price")
    model = keras.Model({"price": price}, keras.layers.Dense(1)(price))
    model.compile(optimizer="adam", loss="mse")
    ckpt.restore(model)

    def batches():
        for features, labels in ckpt.batches():
            yield {"price": features["dense"]["price"][:, None]}, labels

    model.fit(batches(), steps_per_epoch=4, epochs=1, callbacks=[ckpt.callback()], verbose=0)


def main(root: Path) -> None:
    data = root / "datagen"
    cli("datagen", data, "--preset", "small", "--rows", "2000", "--files", "2")
    schema = data / "schema.json"
    files = sorted(str(p) for p in data.glob("*.tfrecord"))
    cli("schema", "infer", *files, "-o", root / "inferred-schema.json")
    for to in ("columnar", "parquet", "tfrecord"):
        cli("convert", data, "--to", to, "--out", root / f"convert-{to}")
    fast = ["--windows", "1", "--window-batches", "2", "--warmup-batches", "1"]
    cli(
        "bench",
        *files,
        "--schema",
        schema,
        *fast,
        "--batch-size",
        "64",
        "--out",
        root / "bench.json",
    )
    cli(
        *("tune", *files, "--schema", schema, "--n-trials", "2", *fast),
        *("--step", "simulated", "--device-time-ms", "1", "--batch-size", "64"),
        *("--confirm-top", "1", "--confirm-windows", "1", "--no-breakdown"),
        *("--no-format-advice", "--storage", root / "study.db"),
        *("--study-name", "modes", "--out", root / "tune" / "out"),
    )
    module = root / "profile_pipeline.py"
    module.write_text(PIPELINE.format(files=files, schema=str(schema)))
    from tfinput.config import PipelineConfig

    PipelineConfig(batch_size=64).to_json(root / "config.json")
    cli(
        *("profile", "--pipeline", f"{module}:pipeline", "--steps", "2", "--warmup", "1"),
        *("--config", root / "config.json"),
        *("--step", "input_only", "--logdir", root / "profile"),
        *("--html", root / "profile-report.html"),
    )
    cli(
        *("schema", "sparsecore", *files, "--schema", schema, "--per-replica-batch-size", "64"),
        *("--max-batches", "2", "--out", root / "sparsecore-limits.json"),
    )
    checkpoint(root, data)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for mask in sys.argv[2:]:
        os.umask(int(mask, 8))
        root = Path(sys.argv[1]) / f"umask-{mask}"
        root.mkdir()
        main(root)
    print("done", flush=True)
