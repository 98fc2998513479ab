"""Which TensorFlow ops touch which large variables, recorded when a capture ends.

TensorFlow's trace names every op it ran (``emb/GatherV2/ReadVariableOp``) with its
time, but not the size of what the op read or wrote: a ``ReadVariableOp`` that copies
a 64 MB embedding table and one that hands over a 200-byte bias look alike. The size
is in the graph that ran, so `record_variable_ops` reads it there, in the process that
ran the steps, right after the profiled steps: every live
``tf.types.experimental.ConcreteFunction`` (the traced graphs of ``tf.function`` and
Keras' train functions) is walked, and each op whose first input is a variable's
resource handle is recorded with the variable's name, shape, dtype and bytes.
`profiles.capture` stores the list in ``tfinput_capture.json`` (``variable_ops``),
and the analysis matches it to the ops of the trace by op name
(`profiles._op_stats`).

This is exact where it applies (the shapes are the graph's own, not guessed from
durations) and needs nothing from the step: any TensorFlow step, Keras or a plain
``tf.function``, is covered. It does not cover graphs compiled by XLA (``jit_compile``,
JAX), whose ops the trace names after HLO instructions, nor traces taken by other
tools (no record: the report says the sizes are unknown).
"""

from __future__ import annotations

import gc
from typing import Any

#: Ops on variables smaller than this are not recorded (they are not embedding-sized,
#: and the record stays small).
RECORD_MIN_BYTES = 1_000_000


def record_variable_ops(*, min_bytes: int = RECORD_MIN_BYTES) -> list[dict[str, object]]:
    """The ops of every live TensorFlow function that take a variable of at least
    ``min_bytes`` as their first input.

    Returns:
      One dict per (function, op): ``function``, ``op`` (the node name the trace
      shows), ``type``, ``variable`` (its name, ``""`` when the handle is not a
      captured variable), ``shape``, ``dtype`` and ``bytes``; sorted by function and op.
      Empty when TensorFlow is not loaded.
    """
    import sys

    if "tensorflow" not in sys.modules:
        return []
    import tensorflow as tf

    out: dict[tuple[str, str], dict[str, object]] = {}
    for function in _live_functions(tf):
        for record in _function_ops(tf, function, min_bytes=min_bytes):
            out.setdefault((str(record["function"]), str(record["op"])), record)
    return [out[key] for key in sorted(out)]


def _live_functions(tf: Any) -> list[Any]:
    """Every live concrete function (traced graph), once each."""
    kind = tf.types.experimental.ConcreteFunction
    seen: dict[int, Any] = {}
    for obj in gc.get_objects():
        if isinstance(obj, kind):
            seen.setdefault(id(obj), obj)
    return list(seen.values())


def _function_ops(tf: Any, function: Any, *, min_bytes: int) -> list[dict[str, object]]:
    """The variable ops of one concrete function (its own graph; functions it calls
    are live concrete functions of their own)."""
    try:
        graph = function.graph
        name = function.function_def.signature.name
        captured = {id(internal): external for external, internal in graph.captures}
        variables = {id(v.handle): v for v in function.variables}
    except Exception:  # a function being torn down, or one without a graph
        return []
    out = []
    for op in graph.get_operations():
        if not op.inputs or op.inputs[0].dtype != tf.resource:
            continue
        external = captured.get(id(op.inputs[0]))
        variable = variables.get(id(external)) if external is not None else None
        shape, dtype = _shape_of(op, variable)
        if shape is None or dtype is None:
            continue
        size = _bytes(shape, dtype)
        if size < min_bytes:
            continue
        out.append(
            {
                "function": name,
                "op": op.name,
                "type": op.type,
                "variable": variable.name.split(":")[0] if variable is not None else "",
                "shape": list(shape),
                "dtype": dtype.name,
                "bytes": size,
            }
        )
    return out


def _shape_of(op: Any, variable: Any) -> tuple[tuple[int, ...] | None, Any]:
    """The variable's static shape and dtype: the captured variable's own, else what
    a whole read returns or a whole assignment writes."""
    if variable is not None:
        shape = variable.shape
        dtype = variable.dtype
    elif op.type == "ReadVariableOp":
        shape, dtype = op.outputs[0].shape, op.outputs[0].dtype
    elif op.type.startswith("Assign") and len(op.inputs) > 1:
        shape, dtype = op.inputs[1].shape, op.inputs[1].dtype
    else:
        return None, None
    if not shape.is_fully_defined():
        return None, None
    return tuple(int(d) for d in shape), dtype.base_dtype


def _bytes(shape: tuple[int, ...], dtype: Any) -> int:
    size = dtype.size
    for d in shape:
        size *= d
    return size
