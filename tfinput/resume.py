"""Resume exactly after preemption: save the input position, restore it in a new process."""

from tfinput._src.core.resume import COMPACT_FORMAT as COMPACT_FORMAT
from tfinput._src.core.resume import STATE_FORMAT as STATE_FORMAT
from tfinput._src.core.resume import InputIterator as InputIterator
from tfinput._src.core.resume import KerasInputCheckpoint as KerasInputCheckpoint
from tfinput._src.core.resume import distributed_steps as distributed_steps
from tfinput._src.core.resume import epoch_seed as epoch_seed
from tfinput._src.core.resume import identified as identified
from tfinput._src.core.resume import identity_differences as identity_differences
from tfinput._src.core.resume import pipeline_identity as pipeline_identity
from tfinput._src.core.resume import verify as verify
