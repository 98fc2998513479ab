"""TPU embedding glue: `TableConfig` / `FeatureConfig` from a schema, and where to
place each table."""

from tfinput._src.applications.tpu import KERAS_RS_PLACEMENT as KERAS_RS_PLACEMENT
from tfinput._src.applications.tpu import Placement as Placement
from tfinput._src.applications.tpu import TableLimits as TableLimits
from tfinput._src.applications.tpu import embedding_configs as embedding_configs
from tfinput._src.applications.tpu import enqueue_weights as enqueue_weights
from tfinput._src.applications.tpu import keras_rs_configs as keras_rs_configs
from tfinput._src.applications.tpu import placement as placement
