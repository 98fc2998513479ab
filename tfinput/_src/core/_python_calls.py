"""Python functions that tf.data calls, and the interpreter's exit.

tf.data runs a Python function (``tf.numpy_function``, ``tf.py_function``,
``Dataset.from_generator``) on its own threads, ahead of the consumer. When the
interpreter exits with such an iterator alive (held by a module-level variable, say),
the iterator is destroyed while Python finalizes the modules, and its destructor waits
for the calls in flight. A call in flight then never returns: Python ends any other
thread that takes the GIL once finalization has begun, so the destructor, and the
exit, wait for ever. A call that *starts* after finalization began fails at once,
without the interpreter (TensorFlow checks ``Py_IsInitialized`` first): only the calls
in flight when it begins matter.

So tfinput empties the pipelines before finalization, in an `atexit` hook (`guard_exit`
registers it: when a pipeline is built, and by `python_call`; a hook registered later,
a `DevicePrefetch`'s say, runs before it). The hook

1. refuses every later call of the functions made by `python_call` (the readers of
   Parquet, of columnar records shuffled globally, the tf.data service guard): each
   returns its ``refused`` result at once and reads nothing, so tf.data fills its
   buffers in an instant and, with no consumer taking from them, stops calling;
2. waits until no thread has been inside a Python function called by tf.data (any of
   them: a generator a user wrapped too) for `QUIET_S`. A call in flight then returns
   once its read does; one that never returns would hold the exit all the same, so
   after `WARN_S` the hook logs what still runs (once) and goes on waiting.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tfinput")

#: What a refused call says (the readers hand it over as their error).
EXITING = "the interpreter is exiting: tfinput reads nothing more"
#: The hook returns once no Python function called by tf.data has run for this long.
QUIET_S = 0.1
#: After this long the hook logs the calls still running.
WARN_S = 10.0
_POLL_S = 0.01
#: TensorFlow's trampoline into Python (``FuncRegistry.__call__``): the outermost frame
#: of a thread of TensorFlow's inside a Python function of tf.data's.
_TRAMPOLINE = "tensorflow.python.ops.script_ops"

_lock = threading.Lock()
_hooked = False
_exiting = threading.Event()
_refused_at = 0.0  # time.monotonic() of the last refused call


def exiting() -> bool:
    """Whether the interpreter's exit has begun (tfinput's hook has run)."""
    return _exiting.is_set()


def guard_exit() -> None:
    """Register the exit hook (once)."""
    global _hooked
    with _lock:
        if not _hooked:
            atexit.register(_drain)
            _hooked = True


def python_call(fn: Callable[..., Any], *, refused: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, for ``tf.numpy_function``: ``fn(*args)`` while the interpreter runs;
    ``refused(*args)`` (cheap, no read, no exception: TensorFlow would log its
    traceback) once its exit has begun."""
    guard_exit()

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if _exiting.is_set():
            global _refused_at
            _refused_at = time.monotonic()
            return refused(*args)
        return fn(*args)

    return call


def _calls_in_flight() -> list[str]:
    """The Python functions tf.data's threads are inside now, each named with the line
    it is at: ``"held (/path/to/file.py:12)"``."""
    trampoline = sys.modules.get(_TRAMPOLINE)
    if trampoline is None:  # TensorFlow not loaded: nothing calls
        return []
    path = trampoline.__file__
    tensorflow = os.path.dirname(os.path.dirname(os.path.dirname(path))) + os.sep
    me = threading.get_ident()
    found = []
    for ident, frame in sys._current_frames().items():
        stack = []  # innermost first
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        if ident == me or stack[-1].f_code.co_filename != path:
            continue
        # The function called: the outermost frame neither TensorFlow's nor this module's.
        called = next(
            (
                f
                for f in reversed(stack)
                if not f.f_code.co_filename.startswith(tensorflow)
                and f.f_code.co_filename != __file__
            ),
            stack[0],
        )
        found.append(f"{called.f_code.co_name} ({called.f_code.co_filename}:{called.f_lineno})")
    return found


def _drain() -> None:
    """The exit hook: refuse `python_call`'s functions, then wait until tf.data has
    stopped calling Python."""
    _exiting.set()
    start = quiet_since = time.monotonic()
    warned = False
    while True:
        now = time.monotonic()
        running = _calls_in_flight()
        if running or _refused_at > quiet_since:
            quiet_since = now
        if now - quiet_since >= QUIET_S:
            return
        if now - start >= WARN_S and not warned:
            log.warning(
                "tfinput: the interpreter's exit waits for Python functions that tf.data "
                "still runs (TensorFlow's iterators would wait for them for ever once it "
                "finalizes): %s",
                "; ".join(running) or "new calls keep starting",
            )
            warned = True
        time.sleep(_POLL_S)
