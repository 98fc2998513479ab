"""Two-tower retrieval: the candidate corpus, a small two-tower model and recall@k."""

from typing import TYPE_CHECKING

from tfinput._src.applications.retrieval import candidate_corpus as candidate_corpus
from tfinput._src.applications.retrieval import recall_at_k as recall_at_k
from tfinput._src.applications.retrieval import two_tower_model as two_tower_model

if TYPE_CHECKING:  # pragma: no cover
    from tfinput._src.applications.retrieval import TwoTowerModel as TwoTowerModel

__all__ = [
    "candidate_corpus",
    "two_tower_model",
    "TwoTowerModel",
    "recall_at_k",
]


def __getattr__(name: str) -> object:
    # TwoTowerModel: made on first use (Keras loads then).
    match name:
        case "TwoTowerModel":
            import tfinput._src.applications.retrieval as module
        case _:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
