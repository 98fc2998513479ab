"""Serve a model from raw requests with exactly the transforms it was trained with."""

from tfinput._src.applications.serving import ROW_LENGTHS_SUFFIX as ROW_LENGTHS_SUFFIX
from tfinput._src.applications.serving import SIGNATURES as SIGNATURES
from tfinput._src.applications.serving import ServingSpec as ServingSpec
from tfinput._src.applications.serving import export as export
from tfinput._src.applications.serving import flatten_features as flatten_features
from tfinput._src.applications.serving import raw_signature as raw_signature
from tfinput._src.applications.serving import serving_fn as serving_fn
