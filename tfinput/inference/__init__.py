"""Schema inference from Parquet/Arrow schemas, sampled tf.train.Example records and
CSV/TSV text: the one engine behind ``tfinput schema infer`` and ``tfinput convert``."""

from tfinput._src.applications.inference import infer_schema as infer_schema
from tfinput._src.applications.inference._decide import LABEL_NAMES as LABEL_NAMES
from tfinput._src.applications.inference._decide import ColumnStats as ColumnStats
from tfinput._src.applications.inference._decide import Inference as Inference
