"""Is a dataset made of native ops only? The check tf.data service needs.

    from tfinput import graph
    ds = tfinput.columnar("data/criteo-col").build(config)
    assert graph.find_python_ops(ds) == []
    graph.assert_native(ds, what="the training input")   # raises, naming the ops

tf.data service workers run a dataset's serialized graph in another process (often on
another host): an op that calls back into the Python interpreter that built the graph
(``tf.py_function``, ``tf.numpy_function``, ``Dataset.from_generator``) cannot run
there (tensorflow/tensorflow#50252). Neither can ``tf.data`` checkpointing of such
state, nor graph export. `find_python_ops` serializes the dataset with
``Dataset._as_serialized_graph`` and walks the GraphDef *and* its function library
(map, interleave and flat_map functions, and the functions those call), so an op
buried in a nested function is found too.

Reported ops: `PYTHON_OPS` (``PyFunc``, ``PyFuncStateless``, ``EagerPyFunc``: every
Python callback) and ``GeneratorDataset`` (what ``from_generator`` builds inside a
``FlatMapDataset``). tfinput's TFRecord and columnar sources are native; its Parquet
source (pyarrow) reads through a ``tf.numpy_function`` (``PyFuncStateless``) and is
reported, as is the columnar source's ``shuffle="global"`` mode (a positioned read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = ["PYTHON_OPS", "find_python_ops", "is_native", "assert_native"]

#: Ops that run Python code in the process that built the graph.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"})


def _graph_def(dataset: tf.data.Dataset) -> Any:
    import tensorflow as tf

    policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    serialized = dataset._as_serialized_graph(external_state_policy=policy)
    return tf.compat.v1.GraphDef.FromString(serialized.numpy())


def _called(node: Any) -> list[str]:
    """Names of the functions a node refers to (``f``, ``init_func``, ``branches``...)."""
    out = []
    for value in node.attr.values():
        if value.HasField("func"):
            out.append(value.func.name)
        if value.HasField("list"):
            out.extend(f.name for f in value.list.func)
    return out


def find_python_ops(dataset: tf.data.Dataset) -> list[str]:
    """Ops of ``dataset`` that need the Python interpreter, one line each.

    Args:
      dataset: A `tf.data.Dataset` (for example `tfinput.Pipeline.build`'s result).

    Returns:
      Sorted, de-duplicated descriptions such as ``"EagerPyFunc in function
      '__inference_...' (used by ParallelMapDatasetV2 'ParallelMapDatasetV2/_7')"``;
      empty if the dataset is native-only.
    """
    graph = _graph_def(dataset)
    functions = {f.signature.name: f for f in graph.library.function}
    found: set[str] = set()

    def walk(name: str, owner: str, seen: set[str]) -> None:
        if name in seen or name not in functions:
            return
        seen.add(name)
        for node in functions[name].node_def:
            if node.op in PYTHON_OPS:
                found.add(f"{node.op} in function {name!r} (used by {owner})")
            for callee in _called(node):
                walk(callee, owner, seen)

    for node in graph.node:
        owner = f"{node.op} {node.name!r}"
        if node.op in PYTHON_OPS:
            found.add(f"{node.op} (graph node {node.name!r})")
        for callee in _called(node):
            walk(callee, owner, set())
    return sorted(found)


def is_native(dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset`` is made of native TensorFlow ops only."""
    return not find_python_ops(dataset)


def assert_native(dataset: tf.data.Dataset, *, what: str = "dataset") -> None:
    """Raise unless ``dataset`` is native-only.

    Args:
      dataset: The dataset to check.
      what: How to call it in the message.

    Raises:
      ConfigError: naming the Python ops found and what to use instead.
    """
    ops = find_python_ops(dataset)
    if ops:
        shown = "; ".join(ops[:5]) + (f"; and {len(ops) - 5} more" if len(ops) > 5 else "")
        raise ConfigError(
            f"{what} is not native-only: {len(ops)} op(s) call back into Python, which "
            f"tf.data service workers cannot run: {shown}. Read with tfinput.columnar or "
            "tfinput.tfrecord (native) instead of Parquet (pyarrow, a Python callback), and replace "
            "tf.py_function/tf.numpy_function by TensorFlow ops"
        )
