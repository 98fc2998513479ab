"""Two-tower retrieval: the candidate corpus, a small two-tower model and recall@k.

A retrieval model scores a query (user, context) against every candidate (item). Its
inputs come from the same logs as a ranker's, split by side: mark each feature
``tower="query"`` or ``tower="candidate"`` in the schema (`tfinput.Schema.with_towers`)
and name the candidate id (``Schema.candidate_id``); `tfinput.Pipeline.with_towers`
then emits ``({"query": ..., "candidate": ...}, labels)`` batches.

    schema = schema.with_towers(
        query=["user_id", "gender"], candidate=["movie_id", "genres"],
        candidate_id="movie_id",
    )
    train = tfinput.parquet("train/*.parquet", schema).with_towers()
    model = retrieval.two_tower_model(schema)
    model.fit(train.build(tfinput.PipelineConfig(batch_size=256)), epochs=5)
    corpus = retrieval.candidate_corpus(tfinput.parquet("all/*.parquet", schema))
    held_out = tfinput.parquet("test/*.parquet", schema).with_towers()
    print(retrieval.recall_at_k(model, held_out.build(config), corpus, k=10))

Keras is imported when a model is made, never when this module is; the model uses
``keras.ops`` only, so it trains on the TensorFlow, JAX and torch backends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Schema

if TYPE_CHECKING:
    import keras

    from tfinput._src.core.pipeline import Pipeline

#: Default bound on `candidate_corpus` (unique candidates held in host memory).
MAX_CANDIDATES = 10_000_000


def _retrieval_schema(schema: Schema, where: str) -> str:
    """The schema's candidate id, after checking both towers are marked.

    Raises:
      ConfigError: no query or candidate feature, or no ``candidate_id``.
    """
    missing = [side for side in ("query", "candidate") if not schema.tower(side)]
    if missing:
        raise ConfigError(
            f"{where}: the schema marks no {' and no '.join(missing)} feature; set "
            'tower="query" / tower="candidate" on its features (Schema.with_towers)'
        )
    if schema.candidate_id is None:
        raise ConfigError(
            f"{where}: the schema names no candidate_id; set Schema.candidate_id (or "
            "Schema.with_towers(candidate_id=...)) to the candidate's id feature"
        )
    return schema.candidate_id


# ------------------------------------------------------------------ corpus
def candidate_corpus(
    pipeline: Pipeline,
    *,
    batch_size: int = 1024,
    max_candidates: int = MAX_CANDIDATES,
) -> Any:
    """The unique candidates of a pipeline's records, with their candidate features.

    Reads every record of ``pipeline``'s source once, in file order (no shuffling),
    keeps the first occurrence of each candidate id and returns a dataset of
    ``(features, ids)`` batches: ``features`` in the candidate tower's per-feature
    format (``{"dense": ..., "ids": ..., "weights": ...}``, the ``dense`` multi-hot
    format), ``ids`` the int32 candidate ids (the id the model sees: for string ids
    the hash bucket, so two raw values sharing a bucket are one candidate). The last
    batch may be smaller than ``batch_size``.

    Memory: the corpus is collected on the host: about
    ``4 * (dense width + id count + weight count)`` bytes per unique candidate
    (``max_len`` ids and weights per multi-hot feature) plus a set of the ids seen;
    10 million candidates with one id, 6 genres and a title take about 0.6 GB. Records
    are streamed, so the number of records does not matter.

    Args:
      pipeline: A `tfinput.Pipeline` whose schema marks the towers and names
        ``candidate_id`` (``with_towers`` need not be set). Point it at every file
        holding candidates (training and held-out) so each query's candidate is in
        the corpus.
      batch_size: Candidates per batch of the returned dataset (and records per read).
      max_candidates: Stop with a `ConfigError` beyond this many unique candidates
        (the host-memory bound).

    Returns:
      A `tf.data.Dataset` of ``(features, ids)``.

    Raises:
      ConfigError: no towers or no ``candidate_id``; a multi-hot format other than
        ``dense``; more than ``max_candidates`` candidates.
    """
    import tensorflow as tf

    from tfinput._src.core.config import PipelineConfig

    cid = _retrieval_schema(pipeline.schema, "candidate_corpus")
    if pipeline.multi_hot_format != "dense":
        raise ConfigError(
            "candidate_corpus: needs multi_hot_format 'dense' (the corpus is collected "
            f"as padded arrays), got {pipeline.multi_hot_format!r}"
        )
    one_side = dataclasses.replace(
        pipeline,
        schema=pipeline.schema.tower_schema("candidate"),
        towers=False,
        layout="per_feature",
        shuffle_files=False,
        service=None,
    )
    config = PipelineConfig.naive(batch_size=batch_size, drop_remainder=False)
    seen: set[int] = set()
    parts: list[Any] = []
    for features, _ in one_side.build(config):
        ids = features["ids"][cid].numpy()
        unique, first = np.unique(ids, return_index=True)
        keep = np.sort([i for v, i in zip(unique.tolist(), first.tolist()) if v not in seen])
        if not len(keep):
            continue
        seen.update(int(v) for v in ids[keep])
        if len(seen) > max_candidates:
            raise ConfigError(
                f"candidate_corpus: more than max_candidates={max_candidates} unique "
                f"values of {cid!r}; raise max_candidates if the host has the memory "
                "(see the docstring's bound)"
            )
        parts.append(tf.nest.map_structure(lambda t, k=keep: t.numpy()[k], features))
    if not parts:
        raise ConfigError(f"candidate_corpus: {pipeline.source.kind} source has no records")
    merged = tf.nest.map_structure(lambda *xs: np.concatenate(xs), *parts)
    ids = merged["ids"][cid]
    return tf.data.Dataset.from_tensor_slices((merged, ids)).batch(batch_size)


# ------------------------------------------------------------------ model
def _two_tower_class() -> type:
    """`TwoTowerModel` (Keras imported now)."""
    from tfinput._src.measurement.models._two_tower import TwoTowerModel

    return TwoTowerModel


def __getattr__(name: str) -> Any:
    if name == "TwoTowerModel":  # the Keras class, made when first asked for
        return _two_tower_class()
    raise AttributeError(f"module 'tfinput._src.applications.retrieval' has no attribute {name!r}")


def two_tower_model(
    schema: Schema,
    *,
    embedding_dim: int = 32,
    hidden: Sequence[int] = (64,),
    temperature: float = 0.05,
    learning_rate: float = 1e-3,
    table_learning_rate: float = 0.05,
    jit_compile: bool = True,
    steps_per_execution: int = 1,
    **kwargs: Any,
) -> Any:
    """A compiled `TwoTowerModel` (in-batch softmax; `tfinput.models.SparseTableAdam`:
    row-wise Adagrad on the embedding rows a batch touches, Adam on the dense layers,
    as `tfinput.models.ranking_model`, so that a step costs what its ids cost, not
    what its tables weigh, on TensorFlow and JAX).

    Args:
      schema: The schema, with ``tower`` marked on its features (untowered features
        are not used) and, for masking accidental hits, ``candidate_id``.
      embedding_dim: Width of the query and candidate vectors. Wider vectors separate
        more candidates, at the price of a larger nearest-neighbour index.
      hidden: Hidden ReLU layer widths of each tower's MLP (``()``: none).
      temperature: Divides the cosine similarities (in ``[-1, 1]``) to make the
        logits; lower sharpens the softmax (harder negatives weigh more) but can make
        training unstable. 0.05 to 0.2 is usual.
      learning_rate: Adam's learning rate (the dense layers).
      table_learning_rate: Row-wise Adagrad's learning rate (the embedding tables). A
        row moves only in the steps that read it, by steps that shrink as it is read
        more: higher rates learn rare ids faster, lower ones keep frequent ids steadier.
      jit_compile: Compile the train step with XLA (pays off on accelerators and long
        runs; on CPU its compile time dominates a few dozen steps).
      steps_per_execution: Training steps per call into the compiled step (``fit``).
      **kwargs: Other `keras.Model` arguments (``name``).

    Raises:
      ConfigError: the schema marks no query or no candidate feature, or
        ``temperature`` <= 0.
    """
    from tfinput._src.measurement.models._table_optimizer import SparseTableAdam

    kwargs.setdefault("name", "two_tower_model")
    model = _two_tower_class()(
        schema, embedding_dim=embedding_dim, hidden=hidden, temperature=temperature, **kwargs
    )
    model.compile(
        optimizer=SparseTableAdam(learning_rate, table_learning_rate=table_learning_rate),
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    # Built now, as `tfinput.models.ranking_model` is: TensorFlow then traces the first
    # train step once, not again after it made the optimizer's variables.
    model.build(None)
    model.optimizer.build(model.trainable_variables)
    return model


# ------------------------------------------------------------------ evaluation
def _numpy_tree(tree: Any) -> Any:
    import tensorflow as tf

    return tf.nest.map_structure(np.asarray, tree)


def recall_at_k(model: keras.Model, queries: Any, corpus: Any, *, k: int = 10) -> float:
    """Held-out recall@k: the fraction of queries whose own candidate is among the
    ``k`` corpus candidates their query vector scores highest (dot product).

    Each query row of ``queries`` has exactly one relevant candidate (its row's
    ``Schema.candidate_id``), so recall@k is the hit rate at k. Scores are computed
    exactly (no approximate index): ``rows x corpus`` dot products, per batch.

    Args:
      model: A `TwoTowerModel` (or anything with ``query_tower``, ``candidate_tower``
        and ``schema``).
      queries: A dataset (or iterable) of `Pipeline.with_towers` batches
        ``({"query": ..., "candidate": ...}, labels)``, e.g. the held-out split.
      corpus: The ``(features, ids)`` batches of `candidate_corpus`.
      k: How many candidates are retrieved per query.

    Returns:
      The recall, in ``[0, 1]``.

    Raises:
      ConfigError: ``k`` < 1, an empty corpus or no queries, or queries whose
        candidate is not in the corpus (build the corpus from files holding them).
    """
    import keras

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"recall_at_k: k must be an integer >= 1, got {k!r}")
    cid = _retrieval_schema(model.schema, "recall_at_k")
    embeddings, corpus_ids = [], []
    for features, ids in corpus:
        out = model.candidate_tower(_numpy_tree(features))
        embeddings.append(keras.ops.convert_to_numpy(out))
        corpus_ids.append(np.asarray(ids))
    if not embeddings:
        raise ConfigError("recall_at_k: the corpus is empty")
    cand = np.concatenate(embeddings)
    cand_ids = np.concatenate(corpus_ids)
    known = set(cand_ids.tolist())
    top = min(k, len(cand_ids))
    hits = rows = 0
    missing: list[int] = []
    for features, _ in queries:
        features = _numpy_tree(features)
        q = keras.ops.convert_to_numpy(model.query_tower(features["query"]))
        truth = features["candidate"]["ids"][cid]
        missing += [int(t) for t in truth if int(t) not in known]
        scores = q @ cand.T
        best = np.argpartition(-scores, top - 1, axis=1)[:, :top]
        hits += int(np.sum(np.any(cand_ids[best] == truth[:, None], axis=1)))
        rows += len(truth)
    if not rows:
        raise ConfigError("recall_at_k: no query batches")
    if missing:
        raise ConfigError(
            f"recall_at_k: {len(missing)} of {rows} queries have a {cid!r} not in the "
            f"corpus (e.g. {missing[0]}); build the corpus (candidate_corpus) from files "
            "that hold the queries' candidates too"
        )
    return hits / rows
