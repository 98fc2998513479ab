"""What this installation is made of: versions and optional parts, for bug reports.

``tfinput doctor`` prints it (``--json`` for scripts); ``tfinput --version`` prints the
one-line summary. Versions come from the installed distributions' metadata, so nothing
heavy is imported except to answer questions metadata cannot (Keras's backend, whether
tensorflow-io's native ops load on this TensorFlow).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import platform
import subprocess
import sys

#: Distributions whose versions a bug report needs, by the name users know them by.
_CORE = {
    "tfinput": ("tfinput",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-nightly"),
    "keras": ("keras",),
    "numpy": ("numpy",),
    "pyarrow": ("pyarrow",),
    "optuna": ("optuna",),
}

#: Optional parts: (what tfinput uses it for, distributions that provide it, the extra).
_OPTIONAL = {
    "jax": ("Keras on the JAX backend, device prefetch to JAX", ("jax",), "jax"),
    "plotly": ("charts in the tuner's HTML report", ("plotly",), "plots"),
    "xprof": ("offline profile analysis (tfinput inspect)", ("xprof",), "profile"),
    "psycopg": ("PostgreSQL storage for multi-host studies", ("psycopg",), "postgres"),
    "tensorflow-io": ("the tensorflow-io Parquet engine", ("tensorflow-io",), "tfio"),
    "keras-rs": (
        "keras-rs DistributedEmbedding configs (keras_rs_configs; Python >= 3.11)",
        ("keras-rs",),
        "keras-rs",
    ),
    "jax-tpu-embedding": (
        "SparseCore preprocessing off the training thread (sparsecore_feed; Python >= 3.12)",
        ("jax-tpu-embedding", "jax_tpu_embedding"),
        "sparsecore",
    ),
}


@dataclasses.dataclass(frozen=True)
class Part:
    """One optional part: installed version (or None) and whether tfinput can use it."""

    name: str
    purpose: str
    version: str | None
    usable: bool
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    python: str
    platform: str
    versions: dict[str, str | None]
    keras_backend: str
    optional: tuple[Part, ...]

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        width = max(len(k) for k in [*self.versions, *(p.name for p in self.optional)]) + 3
        out = [f"{'python':<{width}} {self.python} ({self.platform})"]
        for name, version in self.versions.items():
            shown = version or "NOT INSTALLED"
            if name == "keras" and version:
                shown += f" (backend: {self.keras_backend})"
            out.append(f"{name:<{width}} {shown}")
        out.append("optional parts:")
        for p in self.optional:
            if p.version is None:
                state = "not installed"
            else:
                state = p.version + ("" if p.usable else " (installed, NOT usable)")
            note = f"; {p.note}" if p.note else ""
            out.append(f"  {p.name:<{width - 2}} {state}: {p.purpose}{note}")
        return out


def _version(dists: tuple[str, ...]) -> str | None:
    for d in dists:
        try:
            return md.version(d)
        except md.PackageNotFoundError:
            continue
    return None


def _keras_backend() -> str:
    # Keras reads KERAS_BACKEND, then ~/.keras/keras.json; asking Keras itself is exact.
    try:
        import keras

        return str(keras.config.backend())
    except Exception as e:  # a broken backend install is what doctor must report
        return f"unavailable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"


def _tfio_loads() -> tuple[bool, str]:
    # In a child process: a failing native op load may print or abort.
    # The same probe as the Parquet engine: attribute access loads the native ops.
    code = "import tensorflow_io as t; t.IODataset.from_parquet"
    try:
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"could not check ({e})"
    if r.returncode == 0:
        return True, ""
    return False, "its native ops do not load on this TensorFlow (see README, tensorflow-io)"


def report(*, check_backend: bool = True) -> Report:
    """Collect the versions and optional parts of this installation.

    Args:
      check_backend: import Keras to name its backend (a second or two); without it the
        backend is read from ``KERAS_BACKEND`` only.
    """
    versions = {name: _version(dists) for name, dists in _CORE.items()}
    backend = (
        _keras_backend()
        if check_backend and versions["keras"]
        else os.environ.get("KERAS_BACKEND", "tensorflow (default)")
    )
    parts = []
    for name, (purpose, dists, extra) in _OPTIONAL.items():
        version = _version(dists)
        usable, note = version is not None, ""
        if version is not None and name == "tensorflow-io":
            usable, note = _tfio_loads()
        elif version is None and extra:
            note = f"pip install 'tfinput[{extra}]'"
        parts.append(Part(name, purpose, version, usable, note))
    return Report(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        versions=versions,
        keras_backend=backend,
        optional=tuple(parts),
    )


def summary() -> str:
    """One line: tfinput's version and the versions it runs on (no heavy imports)."""
    v = {name: _version(dists) or "-" for name, dists in _CORE.items()}
    return (
        f"tfinput {v['tfinput']} (Python {platform.python_version()}, TensorFlow "
        f"{v['tensorflow']}, Keras {v['keras']}, numpy {v['numpy']}, pyarrow {v['pyarrow']}, "
        f"optuna {v['optuna']}); `tfinput doctor` for details"
    )
