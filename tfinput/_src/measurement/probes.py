"""What a measurement reads from the machine: CPU time, memory, CPU count, versions.

Every probe is a plain function so that measurements can take a fake one in tests
(`tfinput._src.measurement.windows.measure_window` takes ``clock``, ``cpu_clock`` and ``rss``).
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time


def process_cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (`time.process_time`)."""
    return time.process_time()


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    """Resident memory of this process now (``/proc/self/statm``; else the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), else `os.cpu_count`."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _tf_version() -> str | None:
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "__version__"):
        return str(tf.__version__)
    from importlib import metadata

    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine(*, cpu_count: int | None = None) -> dict[str, object]:
    """The description recorded next to every measurement.

    Args:
      cpu_count: CPUs to assume (None: the process's affinity mask).

    Returns:
      CPU model and counts, library versions and the load average, JSON-ready.
    """
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    import numpy as np
    import pyarrow

    return {
        "cpu_model": _cpu_model(),
        "cpu_count": cpu_count or available_cpus(),
        "logical_cpus": os.cpu_count(),
        "tensorflow": _tf_version(),
        "keras_backend": keras_backend(),
        "pyarrow": pyarrow.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_average": load,
    }


def keras_backend() -> str:
    """The Keras backend of this process (``KERAS_BACKEND``, else ``~/.keras/keras.json``,
    else ``tensorflow``), read without importing Keras when it is not imported yet."""
    import sys

    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "config"):
        return str(keras.config.backend())
    env = os.environ.get("KERAS_BACKEND")
    if env:
        return env
    import json

    path = os.path.join(os.environ.get("KERAS_HOME", os.path.expanduser("~/.keras")), "keras.json")
    try:
        with open(path) as f:
            return str(json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"
