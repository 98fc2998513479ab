"""TFRecord files of ``tf.train.Example``: names, compression, reading and writing.

Public and stable (docs/api.md): the names of `__all__`. Implemented in
`tfinput._src.core.formats.tfrecord`."""

from __future__ import annotations

from tfinput._src.core._public import export as _export
from tfinput._src.core.formats import tfrecord as _impl
from tfinput._src.core.formats.tfrecord import *  # noqa: F403

__all__ = _export(__name__, _impl)
