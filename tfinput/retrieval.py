"""Two-tower retrieval: the candidate corpus, a small two-tower model and recall@k.

Importing this module imports Keras (`TwoTowerModel` is a Keras model)."""

from tfinput._src.applications.retrieval import TwoTowerModel as TwoTowerModel
from tfinput._src.applications.retrieval import candidate_corpus as candidate_corpus
from tfinput._src.applications.retrieval import recall_at_k as recall_at_k
from tfinput._src.applications.retrieval import two_tower_model as two_tower_model
