"""Is a dataset made of native ops only? The check tf.data service needs."""

from tfinput._src.core.service import PYTHON_OPS as PYTHON_OPS
from tfinput._src.core.service import assert_native as assert_native
from tfinput._src.core.service import find_python_ops as find_python_ops
from tfinput._src.core.service import is_native as is_native
