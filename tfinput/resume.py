"""Resume exactly after preemption: save the input position, restore it in a new process."""

from tfinput._src.core._input_iterator import InputIterator as InputIterator
from tfinput._src.core._input_iterator import distributed_steps as distributed_steps
from tfinput._src.core._input_iterator import epoch_seed as epoch_seed
from tfinput._src.core._resume_identity import COMPACT_FORMAT as COMPACT_FORMAT
from tfinput._src.core._resume_identity import STATE_FORMAT as STATE_FORMAT
from tfinput._src.core._resume_identity import identified as identified
from tfinput._src.core._resume_identity import identity_differences as identity_differences
from tfinput._src.core._resume_identity import pipeline_identity as pipeline_identity
from tfinput._src.core.resume import KerasInputCheckpoint as KerasInputCheckpoint
from tfinput._src.core.resume import verify as verify
