"""Keras 3 layers and a small DCN-style ranking model over tfinput batches."""

from tfinput._src.measurement.models import PaddedEmbeddingBag as PaddedEmbeddingBag
from tfinput._src.measurement.models import RankingModel as RankingModel
from tfinput._src.measurement.models import ranking_model as ranking_model
from tfinput._src.measurement.models import signed_log1p as signed_log1p
from tfinput._src.measurement.models._table_optimizer import SparseTableAdam as SparseTableAdam
