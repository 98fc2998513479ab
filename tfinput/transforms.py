"""Batch-level TensorFlow transforms: raw columns in, fixed-shape tensors out."""

from tfinput._src.core.transforms import MULTI_HOT_FORMATS as MULTI_HOT_FORMATS
from tfinput._src.core.transforms import TF_DTYPES as TF_DTYPES
from tfinput._src.core.transforms import parse_spec as parse_spec
from tfinput._src.core.transforms import transform_batch as transform_batch
