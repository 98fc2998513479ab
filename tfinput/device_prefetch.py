"""Move batches to the accelerator ahead of the step, overlapping transfer with compute."""

from tfinput._src.core.device_prefetch import INPUT_STAGES as INPUT_STAGES
from tfinput._src.core.device_prefetch import DevicePrefetch as DevicePrefetch
from tfinput._src.core.device_prefetch import to_jax as to_jax
from tfinput._src.core.device_prefetch import to_tensorflow as to_tensorflow
