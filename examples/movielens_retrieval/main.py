"""MovieLens ratings -> tfinput two-tower inputs -> a retrieval model and recall@k.

The steps a user runs on their own interaction logs, on the real MovieLens sample
(200 ratings of MovieLens 1M joined with users and movies,
``../shared/data/movielens_sample.txt``; ``genres`` is a pipe-separated multi-hot):

1. ``tfinput convert``: the CSV into Parquet files, the schema inferred on the way
   (160 rows to train, the last 40 held out);
2. the towers marked on the schema: user-side features (gender, age, occupation) for
   the query tower, movie-side (movie_id, genres) for the candidate tower, ``movie_id``
   the candidate id (see ``QUERY`` for why user_id, zip and title are left out);
3. the two-tower model (`tfinput.retrieval.two_tower_model`, in-batch softmax) trained
   on ``Pipeline.with_towers()`` batches;
4. the candidate corpus (every unique movie of both splits) and recall@k of the
   held-out ratings against it.

    python examples/movielens_retrieval/main.py           # about 20 s on 2 cores
    python examples/movielens_retrieval/main.py --quick   # fewer epochs (CI)

The sample is found at ``shared/data`` beside the repository, or ``$TFINPUT_DATA_DIR``.
With 160 training rows and 187 distinct movies, most held-out movies were never
trained on: the recall is noisy and the random baseline (k / corpus size) is printed
next to it. On your data, point step 1 at your files.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import tfinput
from tfinput import cli

TRAIN_ROWS = 160  # the first 160 rows train, the last 40 are held out
# 193 users and 187 movies in 200 ratings: user_id, zip and title are all but unique
# per row, so their embeddings only memorise the training rows (held-out recall@10
# 0.000 with them in the towers). The towers use the features that generalise; the
# others stay in the schema, unmarked, and are not read.
QUERY = ("gender", "age", "occupation")
CANDIDATE = ("movie_id", "genres")


def data_dir() -> Path:
    """The real sample data: ``$TFINPUT_DATA_DIR`` or ``shared/data`` beside the repo."""
    env = os.environ.get("TFINPUT_DATA_DIR") or os.environ.get("TFINPUT_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not (path / "movielens_sample.txt").is_file():
        sys.exit(
            f"movielens_retrieval: no movielens_sample.txt in {path}; set TFINPUT_DATA_DIR "
            "to the directory holding the project's sample data"
        )
    return path


def tfinput_cli(*argv: str) -> None:
    """Run one ``tfinput`` command in this process, echoing it as a shell line."""
    print(f"$ tfinput {shlex.join(argv)}", flush=True)
    code = cli.main(list(argv))
    if code != 0:
        sys.exit(f"movielens_retrieval: tfinput {argv[0]} exited with {code}")


_START = time.perf_counter()


def step(title: str) -> None:
    print(f"\n== {title}  [{time.perf_counter() - _START:.0f} s]", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="8 epochs instead of 20")
    p.add_argument("--k", type=int, default=10, help="candidates retrieved per query")
    p.add_argument("--work", help="keep every file here (default: a temporary directory)")
    args = p.parse_args()
    epochs = 8 if args.quick else 20
    batch_size = 32
    csv = data_dir() / "movielens_sample.txt"

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = work / "data"

        step("1. convert the CSV to Parquet and infer the schema (160 train, 40 held out)")
        tfinput_cli(
            "convert", str(csv), "--out", str(data), "--to", "parquet",
            "--list-column", "genres", "--label", "rating",
            "--rows-per-file", str(TRAIN_ROWS), "--overwrite",
        )  # fmt: skip
        train, held_out = sorted(str(f) for f in data.glob("part-*.parquet"))
        inferred = tfinput.Schema.from_json(data / "schema.json")
        print(f"inferred: {[f'{f.name} ({f.kind})' for f in inferred.features]}")

        step("2. mark the query and candidate towers")
        # 160 rows do not support 32- to 52-wide embeddings: 8 is plenty.
        tables = tuple(dataclasses.replace(t, dim=8) for t in inferred.tables)
        schema = inferred.replace(tables=tables).with_towers(
            query=QUERY, candidate=CANDIDATE, candidate_id="movie_id"
        )
        unused = [f.name for f in schema.features if f.tower is None]
        print(f"query: {[f.name for f in schema.tower('query')]}")
        print(f"candidate: {[f.name for f in schema.tower('candidate')]} (id: movie_id)")
        print(f"not in either tower (not read): {unused}")
        schema_path = work / "schema.json"
        schema.to_json(schema_path)
        print(f"schema with towers written to {schema_path}")

        step(f"3. train the two-tower model ({epochs} epochs, in-batch softmax)")
        import keras  # Keras loads here

        from tfinput import retrieval

        keras.utils.set_random_seed(0)  # the same initial weights every run
        pipeline = tfinput.parquet([train], schema).with_towers()
        config = tfinput.PipelineConfig(batch_size=batch_size, shuffle_buffer=TRAIN_ROWS)
        config = config.replace(shuffle_seed=0)
        batch, _ = next(iter(pipeline.build(config)))
        print(
            "batch: "
            + ", ".join(
                f"{side}.{group}.{name} {list(t.shape)}"
                for side in batch
                for group in batch[side]
                for name, t in batch[side][group].items()
            )
        )
        # XLA pays off on accelerators and long runs; on CPU, for a few dozen steps,
        # its compile time would dominate.
        model = retrieval.two_tower_model(schema, embedding_dim=16, jit_compile=False)
        history = model.fit(
            pipeline.build(config).repeat(),
            steps_per_epoch=TRAIN_ROWS // batch_size,
            epochs=epochs,
            verbose=0,
        )
        loss = history.history["loss"]
        print(f"train loss {loss[0]:.4f} -> {loss[-1]:.4f}")

        step(f"4. the candidate corpus and recall@{args.k} on the held-out ratings")
        corpus = retrieval.candidate_corpus(tfinput.parquet([train, held_out], schema))
        size = sum(int(ids.shape[0]) for _, ids in corpus)
        evaluation = tfinput.parquet([held_out], schema).with_towers()
        queries = evaluation.build(
            tfinput.PipelineConfig(batch_size=64, drop_remainder=False, deterministic=True)
        )
        rows = sum(int(y.shape[0]) for _, y in queries)
        recall = retrieval.recall_at_k(model, queries, corpus, k=args.k)
        train_recall = retrieval.recall_at_k(
            model, pipeline.build(config.replace(drop_remainder=False)), corpus, k=args.k
        )
        print(f"corpus: {size} unique movies; held-out queries: {rows}")
        print(f"random baseline recall@{args.k}: {min(1.0, args.k / size):.3f}")
        print(f"training-rows recall@{args.k}: {train_recall:.3f}")
        print(f"recall@{args.k}: {recall:.3f}")


if __name__ == "__main__":
    main()
