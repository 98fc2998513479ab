"""TensorFlow's own log lines kept out of a command's output: `quiet_tensorflow`,
called by `tfinput.cli.main` before anything imports TensorFlow, unless the global
``--verbose`` (`wants_verbose`) or the user's ``TF_CPP_MIN_LOG_LEVEL`` says otherwise."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["quiet_tensorflow", "wants_verbose"]

# Lines TensorFlow's C++ runtime writes to stderr while it loads, before its log level
# applies (TF 2.20+: absl logs INFO lines such as the oneDNN notice whatever
# TF_CPP_MIN_LOG_LEVEL says): INFO and WARNING lines in the glog/absl format, and the
# continuation of the cpu_feature_guard notice. E(rror) and F(atal) lines are kept.
_TF_NOISE = re.compile(
    r"^(?:[IW]\d{4} +\d+:\d+:\d+\.\d+ +\d+ [\w.]+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions:.*rebuild TensorFlow)"
)
_TF_WARNING_MODULES = r"(tensorflow|keras|tf_keras|absl|google\.protobuf|h5py)(\.|$)"


def wants_verbose(argv: list[str]) -> bool:
    """Whether the global ``--verbose`` comes before the subcommand in ``argv``."""
    for token in argv:
        if token == "--verbose":
            return True
        if token == "--" or not token.startswith("-"):
            return False
    return False


def quiet_tensorflow(*, verbose: bool = False) -> bool:
    """Keep TensorFlow's C++ and Python log lines out of a command's output.

    Unless ``verbose`` or the user set ``TF_CPP_MIN_LOG_LEVEL``: sets it to ``"2"``
    (warnings and info off, errors kept; ``TF_ENABLE_ONEDNN_OPTS`` is left alone), sets
    the ``tensorflow`` and ``absl`` Python loggers to ERROR, ignores Python warnings
    raised in TensorFlow, Keras and absl, and drops the INFO/WARNING lines TensorFlow
    writes while it loads (before the level applies). Must run before TensorFlow is
    imported; `tfinput.cli.main` calls it first.

    Returns:
      Whether anything was changed.
    """
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return False
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=_TF_WARNING_MODULES)
    if "tensorflow" not in sys.modules and not any(
        isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    return True


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Filters stderr (the file descriptor) while ``tensorflow`` itself is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                with _filtered_stderr():
                    real(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module

        # A loader that takes no attributes is left as it is (no filter).
        with contextlib.suppress(AttributeError):
            loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file; then replay what is not noise (all
    of it if the body raised)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    ok = False
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
            ok = True
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            keep = [
                line
                for line in text.splitlines(keepends=True)
                if not ok or not _TF_NOISE.match(line)
            ]
            if keep:
                sys.stderr.write("".join(keep))
                sys.stderr.flush()
