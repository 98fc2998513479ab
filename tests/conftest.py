"""Shared fixtures (small real TFRecord, Parquet and columnar files, written once per
test run) and the split of the suite between the two ends of the supported matrix."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA (TensorFlow's jit_compile and JAX, here and in the child processes the tests start)
# compiles with LLVM's cheap pipeline: the tests run a few steps of each compiled
# program, so full optimisation is CPU time spent for nothing (a fifth of an XLA test's
# CPU on the 2-core machine). The programs and their numerics are XLA's as usual.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
)

import pytest

# ------------------------------------------------------------- which end runs what
# CI runs this suite on both ends of the supported matrix (README, "Supported
# versions"), the two at the same time; `./dev test --oldest` / `--newest` set
# TFINPUT_TEST_END. This is the one place that says which tests run where:
#
# - Every test runs on both ends, except:
# - the end-to-end modules in `ONE_END`, each on the one end it names. Each drives, in
#   real processes, code whose version-dependent parts (reading, parsing, transforms,
#   layouts, resume, the CLI entry points, the tf.data service API) other tests check
#   on both ends; the reason is given per module. They are split between the ends so
#   that the two take about the same time in CI (a 2-core machine: the end that
#   finishes first would leave its core idle);
# - single tests in `ONE_END_TESTS`, each on the one end it names, with the reason (the
#   same code path runs on both ends in a cheaper test, or on the other end in an
#   end-to-end module);
# - the cases of the parametrised tests in `SPLIT_CASES`: the oldest end runs the cases
#   listed, the newest end the others. The cross product runs in full, once, across the
#   two ends, and each end's share still covers every source, layout and mode of it
#   (the oldest end: Python 3.10, TensorFlow 2.17, Keras 3.12, numpy 1.x, pyarrow 25).
#
# So a new test runs on both ends unless it or its module is listed here, with a reason.
ONE_END: dict[str, tuple[str, str]] = {
    "tests/test_examples.py": (
        "oldest",
        "the example scripts chain public calls (convert, schema inference, tune, fit, "
        "export) that tests/tfinput checks on both ends and tests/tuners across the two; "
        "here they are "
        "kept runnable as scripts, on the older TensorFlow and Keras they must run on",
    ),
    "tests/test_examples_resume.py": (
        "oldest",
        "the JAX example's preemption run (JAX 0.5 there); the JAX prefetcher's exact "
        "resume is checked on both ends by tests/tfinput/test_device_prefetch.py and "
        "test_resume.py",
    ),
    "tests/test_docs_commands.py": (
        "newest",
        "keeps the docs in step with the CLI (the same text and argument parser on both "
        "ends), on the versions a new reader installs; every command's behaviour is "
        "tested on both ends under tests/tfinput/cli (the tune command's on this end, in "
        "tests/tuners/test_cli.py)",
    ),
    "tests/test_docs_serving.py": (
        "oldest",
        "runs docs/serving.md's code blocks as a new reader would (on the oldest versions "
        "the page covers); export and its signatures are checked on both ends by "
        "tests/tfinput/test_serving.py",
    ),
    "tests/test_docs_resume.py": (
        "oldest",
        "runs docs/resume.md's code blocks as a new reader would (on the oldest versions "
        "the page covers); every resume route is checked on both ends by "
        "tests/tfinput/test_resume.py",
    ),
    "tests/test_preemption.py": (
        "oldest",
        "SIGKILLs a training process; the checkpoint and state paths it takes are "
        "checked in-process on both ends by tests/tfinput/test_resume.py",
    ),
    "tests/test_service_faults.py": (
        "oldest",
        "kills tf.data service server processes (TensorFlow 2.17's service here); the "
        "guard on the default read is exercised on both ends by "
        "tests/tfinput/test_service.py, and the service API by it and test_fleet.py",
    ),
    "tests/tuners/test_storage_postgres.py": (
        "oldest",
        "tuner workers on a PostgreSQL storage: Optuna is 5.0 on both ends, and the "
        "storage code paths are checked on both ends by tests/tuners/test_storage.py",
    ),
    "tests/test_open_ports.py": (
        "newest",
        "where the servers listen is fixed in TensorFlow's server code for every supported "
        "version (no bind-address option in 2.17-2.21; grpc+local absent from both pip "
        "builds, docs/scaling.md); the oldest end runs serve itself in "
        "tests/tfinput/test_serve.py",
    ),
    "tests/test_file_modes.py": (
        "oldest",
        "the modes come from tfinput's own writes (os.mkdir, open, renames), the same code "
        "on every TensorFlow; the newest end writes the same outputs in the convert, "
        "datagen and checkpoint tests",
    ),
    "tests/test_docs_python.py": (
        "newest",
        "the README's Python block as printed; each call in it (infer_schema, the "
        "pipeline, tuners.tune with its progress lines) is tested on both ends in "
        "tests/tfinput and tests/tuners",
    ),
    "tests/test_killed_outputs.py": (
        "newest",
        "SIGKILLs conversions and data generations; the staging and commit they take are "
        "plain file operations, checked in-process on both ends by "
        "tests/tfinput/_src/core/test_outputs.py",
    ),
    "tests/tfinput/_src/applications/convert/test_ray_engine.py": (
        "newest",
        "Ray Data runs tfinput's own readers and writers, which tests/tfinput/_src/applications/convert "
        "checks on both ends (pyarrow 25 included)",
    ),
}

#: Whole modules of the tuner's tests, each on one end: the tuner is Python over Optuna
#: (5.0 on both ends) and tfinput's public measurement API, whose TensorFlow-dependent
#: parts (windows, steps, bench, the pipelines measured) tests/tfinput checks on both
#: ends; the modules are split so that each end runs about half of the tuner's tests.
#: Unlike `ONE_END`'s end-to-end modules, ``--quick`` keeps them.
ONE_END_MODULES: dict[str, tuple[str, str]] = {
    "tests/tuners/test_study.py": (
        "newest",
        "the study loop, pruning, storage and resume are Optuna 5.0 and tfinput's "
        "measurement, both tested on both ends; the oldest end runs test_confirm and "
        "test_columnar_advice, which drive the same tune() over real pipelines",
    ),
    "tests/tuners/test_cli.py": (
        "newest",
        "the tune command maps its arguments onto TuneOptions (no TensorFlow of its own); "
        "the oldest end runs every tfinput command's argument handling "
        "(tests/tfinput/cli) and tunes through the examples (tests/test_examples.py)",
    ),
    "tests/tuners/test_confirm.py": (
        "oldest",
        "the confirmation re-measures the top configs through tfinput.measure, checked on "
        "both ends; the newest end tunes real pipelines end to end in test_study and "
        "test_cli",
    ),
    "tests/tuners/test_columnar_advice.py": (
        "oldest",
        "the format advice converts a sample with tfinput.convert and measures it with "
        "bench's roofline, both tested on both ends (tests/tfinput/_src/applications/"
        "convert and bench); what the advice adds is arithmetic over those measurements",
    ),
}

#: Parametrised tests whose cases are split between the ends: the oldest end runs the
#: cases listed, the newest end the others, and why. The listed cases cover every source,
#: layout and mode (or knob) of the parametrisation at least once, and so do the others,
#: so each version-dependent path runs on both ends; the full cross product, where a
#: failure would be one source meeting one mode, runs once across the two.
SPLIT_CASES: dict[str, tuple[frozenset[str], str]] = {
    "tests/tfinput/test_resume.py::test_every_source_and_mode_resumes_exactly_both_ways": (
        frozenset(
            {
                "tfrecord-shuffle",
                "parquet-interleave",
                "wrapped-file_shuffle",
                "columnar-sharded",
                "parquet-two_epochs",
                "tfrecord-across_epochs",
                "columnar-across_epochs",
            }
        ),
        "each of the 4 sources and each of the 6 modes once, columnar's own shuffle over "
        "an epoch boundary too: the modes' checkpoint behaviour is TensorFlow's, the "
        "sources' is tfinput's",
    ),
    "tests/tfinput/test_resume_compact.py::test_compact_state_resumes_exactly": (
        frozenset({"first", "back-over-pass-end", "third-pass"}),
        "a save in the first pass, one handing batches back over a pass's end, and one "
        "in a later pass: the compact state's three arithmetic cases",
    ),
    "tests/test_exactly_once.py::test_every_example_exactly_once": (
        frozenset(
            {
                "tfrecord-1-pipeline-deterministic",
                "parquet-3-pipelines-nondeterministic",
                "wrapped-3-pipelines-deterministic",
                "tfrecord-3-pipelines-nondeterministic",
            }
        ),
        "every source, one and three pipelines, both determinism settings",
    ),
    "tests/tfinput/_src/core/sources/test_columnar_reader.py::test_every_example_exactly_once": (
        frozenset(
            {
                "rebatch-1-pipeline-deterministic",
                "whole-chunks-3-pipelines-nondeterministic",
                "rebatch-3-pipelines-nondeterministic",
                "whole-chunks-1-pipeline-deterministic",
            }
        ),
        "both read modes, one and three pipelines, both determinism settings",
    ),
    "tests/tfinput/_src/core/sources/test_parquet.py::"
    "test_a_restored_iterator_yields_exactly_the_rest_of_the_epoch": (
        frozenset({"in-order", "row-shuffle", "sharded"}),
        "in order, row-shuffled and sharded; the file-shuffle, interleave and partial-batch "
        "cases are also resumed on both ends by tests/tfinput/test_resume.py",
    ),
    "tests/test_multi_host.py::test_fewer_files_than_hosts_fall_back_to_data_sharding": (
        frozenset({"columnar"}),
        "the fallback is one branch of tfinput's sharding; the file-level sharding of every "
        "source runs on both ends in test_four_hosts_read_disjoint_whole_files_that_cover_"
        "every_file",
    ),
    "tests/tfinput/test_layout.py::test_every_feature_is_identical_in_both_layouts": (
        frozenset(
            {
                "tfrecord-keep-tail",
                "parquet-drop-remainder",
                "columnar-keep-tail",
                "wrapped-drop-remainder",
            }
        ),
        "each end packs and unpacks every source once, with and without a partial last batch",
    ),
    "tests/tfinput/_src/applications/convert/test_readers.py::test_parquet_and_tfrecord_inputs": (
        frozenset({"parquet-columnar", "tfrecord-parquet", "parquet-tfrecord"}),
        "each end reads both input formats and writes each output format once (the "
        "newest end: parquet-parquet, tfrecord-columnar, tfrecord-tfrecord)",
    ),
    "tests/test_bad_input.py::test_nan_or_inf_multi_hot_weight": (
        frozenset({"nan-dense", "inf-ragged", "nan-sparse"}),
        "each end meets every multi-hot format once, and both NaN and infinity",
    ),
    "tests/test_bad_input.py::test_corrupt_or_truncated_tfrecord_names_the_file": (
        frozenset({"corrupt-records", "truncated-read-batch"}),
        "each end meets a corrupt and a truncated file, one read record by record and one "
        "through read_batch's mini-batches",
    ),
    "tests/tfinput/_src/core/sources/test_columnar_reader.py::test_batches_identical_to_tfrecord_and_parquet": (
        frozenset({"1-chunk", "3-chunks-keep-tail", "rebatch-64"}),
        "each end reads whole chunks and rebatches, with and without a partial last batch",
    ),
    "tests/test_multi_host.py::test_four_hosts_read_disjoint_whole_files_that_cover_every_file": (
        frozenset({"tfrecord", "parquet"}),
        "the file plan is tfinput's own (plan_shards) for every source; each source reads "
        "a file list on both ends in its own tests (the newest end: columnar)",
    ),
    "tests/tfinput/test_sparsecore.py::test_counts_equal_brute_force": (
        frozenset({"1-4-32-none-dense", "2-2-40-auto-ragged", "4-2-8-stacking2-sparse"}),
        "the oldest end counts every multi-hot format and every stacking once; the counts "
        "are numpy over the batches the pipeline builds (checked on both ends)",
    ),
    "tests/tfinput/test_transforms.py::test_sparse_and_ragged_formats_hold_the_same_ids": (
        frozenset({"parquet-ragged", "tfrecord-sparse", "wrapped-ragged"}),
        "each end reads every source once, and both formats",
    ),
    "tests/tfinput/_src/applications/cli/test_tf_logs.py::test_commands_print_no_tensorflow_log_lines": (
        frozenset({"demo-check-convert"}),
        "each command once (three per end, each end's in one process); the filter that "
        "keeps TensorFlow's lines out is the same code for all (its own tests run on both "
        "ends); the lines TensorFlow writes differ by version, so each end runs commands "
        "that run ops",
    ),
    "tests/test_bad_input.py::test_nan_or_inf_label": (
        frozenset({"nan"}),
        "NaN and infinity meet the same finiteness check of the label; each end feeds one "
        "(and test_nan_or_inf_multi_hot_weight feeds both on each end)",
    ),
    "tests/test_bad_input.py::test_nan_or_inf_in_dense_feature": (
        frozenset({"inf"}),
        "NaN and infinity meet the same finiteness check of a dense feature; each end "
        "feeds one, the other end the other",
    ),
    "tests/tfinput/test_serving.py::test_examples_and_raw_inputs_equal_the_training_batch": (
        frozenset({"per_feature"}),
        "the serving function wraps the same transforms for both layouts; packing itself "
        "is checked on both ends by tests/tfinput/test_layout.py, and each end exports and "
        "reloads a SavedModel (test_exported_savedmodel_reloaded_gives_the_training_inputs_"
        "and_predictions)",
    ),
    "tests/tfinput/_src/applications/cli/commands/test_check.py::"
    "test_folded_ids_are_counted_on_every_source": (
        frozenset({"columnar"}),
        "the folded-id count is one graph over the source's decode step, and each "
        "source's decode is read on both ends by its own tests; each end counts one source",
    ),
    "tests/tfinput/_src/applications/convert/test_writers.py::"
    "test_csv_to_columnar_reads_like_parquet": (
        frozenset({"criteo"}),
        "the same writers on two real CSV data sets; each end converts one (the Criteo "
        "columns on the oldest end, MovieLens' list column on the newest)",
    ),
    "tests/tfinput/test_device_prefetch.py::test_get_state_resumes_exactly_in_a_new_prefetcher": (
        frozenset({"to-jax"}),
        "the prefetcher's saved position is the same code for both puts; each end resumes "
        "one (to_jax's other paths run on both ends in this module)",
    ),
    "tests/tfinput/_src/core/sources/test_parquet.py::"
    "test_a_position_restored_into_another_build_is_refused": (
        frozenset({"other-files", "other-batch-size"}),
        "the refusal compares the saved identity with the build's (tfinput's own code); "
        "the newest end restores past the files' end, the oldest end the other two cases",
    ),
}

#: Single tests (a function, or one case of it) run on one end only: end and reason.
ONE_END_TESTS: dict[str, tuple[str, str]] = {
    # The tuner over one more kind of pipeline or step: the tuner itself is split between
    # the ends (ONE_END_MODULES); what it reads or trains runs on both ends elsewhere.
    "tests/tfinput/columnar_records/test_columnar_records.py::"
    "test_tuner_accepts_a_columnar_pipeline": (
        "newest",
        "columnar reading runs on both ends in tests/tfinput/_src/core/sources, and the "
        "oldest end tunes over a columnar sample in tests/tuners/test_columnar_advice.py",
    ),
    "tests/tfinput/test_retrieval.py::test_the_tuner_measures_the_two_tower_model_as_its_step": (
        "oldest",
        "the two-tower model trains on both ends in test_two_tower_model_trains_and_recall_"
        "at_k; the newest end tunes real Keras steps in test_keras_steps_and_tune_on_the_"
        "jax_backend (tests/tfinput/_src/measurement/steps/test_keras.py)",
    ),
    "tests/profiles/test_cli.py::test_profile_demo": (
        "newest",
        "the demo pipeline is profiled like any other: the oldest end profiles pipelines "
        "and steps in this module's test_profile_pipeline cases",
    ),
    "tests/tfinput/test_resume.py::test_keras_fit_resumes_mid_epoch_on_tensorflow[tfrecord]": (
        "oldest",
        "the newest end runs the other case (columnar, steps_per_execution 3, keep 0) of "
        "the same fit, stop and resume; both ends run every resume route in-process",
    ),
    "tests/tfinput/test_resume.py::test_keras_fit_resumes_mid_epoch_on_tensorflow"
    "[columnar-spe3-keep0]": (
        "newest",
        "the oldest end runs the other case (tfrecord) of the same fit, stop and resume, "
        "and docs/resume.md's Keras fit recipe",
    ),
    "tests/tfinput/test_resume.py::test_keras_fit_resumes_mid_epoch_on_jax": (
        "newest",
        "the oldest end (JAX 0.5) preempts and resumes the JAX example in real processes "
        "(tests/test_examples_resume.py) and runs docs/resume.md's JAX recipe",
    ),
    "tests/tfinput/test_models.py::test_ranking_model_fits_with_the_tuned_steps_per_execution": (
        "oldest",
        "the newest end fits the ranking model with steps_per_execution 3 in test_resume's "
        "columnar case and tunes it in tests/tfinput/_src/measurement/steps/test_keras.py",
    ),
    "tests/tfinput/test_models.py::test_ranking_model_trains_with_jit_compile": (
        "oldest",
        "the newest end compiles and trains the same model under XLA with packed batches "
        "(test_ranking_model_takes_packed_batches_with_jit_compile); per-feature batches "
        "go through the same layers on both ends without XLA",
    ),
    "tests/tfinput/test_models.py::test_ranking_model_takes_packed_batches_with_jit_compile": (
        "newest",
        "the oldest end compiles and trains the same model under XLA with per-feature "
        "batches (test_ranking_model_trains_with_jit_compile); packing is checked on both "
        "ends by tests/tfinput/test_layout.py",
    ),
    "tests/tfinput/test_fleet.py::test_the_tuner_searches_the_service_knobs_and_sizes_the_fleet": (
        "newest",
        "the tuner's search over the service knobs is tfinput's and Optuna's code (Optuna "
        "5.0 on both ends); the oldest end starts, kills and restarts tf.data service "
        "servers in tests/test_service_faults.py and runs test_fleet's other tests",
    ),
    # The JAX backend in a child process (JAX 0.5 and 0.12 at the two ends): each end
    # trains through it, in two tests of the four.
    "tests/tfinput/test_retrieval.py::test_two_tower_model_trains_on_jax_under_xla": (
        "oldest",
        "the newest end trains on the JAX backend in test_keras_steps_and_tune_on_the_jax_"
        "backend and profiles it in tests/profiles/test_cli.py; the retrieval model's "
        "layers run on both ends on TensorFlow",
    ),
    "tests/tfinput/test_models.py::test_ranking_model_takes_packed_numpy_batches_on_the_"
    "jax_backend": (
        "oldest",
        "the newest end trains the ranking model on the JAX backend in "
        "test_keras_steps_and_tune_on_the_jax_backend and the JAX Keras resume test; "
        "packed batches are unpacked by the same layout code on both ends",
    ),
    "tests/tfinput/_src/measurement/steps/test_keras.py::test_keras_steps_and_tune_on_the_jax_backend": (
        "newest",
        "the oldest end trains Keras models on the JAX backend in test_models' and "
        "test_retrieval's JAX tests; the steps and their feeding knobs are tested on both "
        "ends on TensorFlow, and the JAX step (tests/tfinput/_src/measurement/steps/test_jax.py) on both",
    ),
    "tests/profiles/test_cli.py::test_profile_the_ranking_steps_on_the_jax_backend": (
        "newest",
        "the oldest end profiles steps on TensorFlow (this module's other tests), and "
        "the trace analysis is the same code for both backends' traces",
    ),
    "tests/tfinput/_src/applications/cli/test_tf_logs.py::test_verbose_shows_tensorflow_log_lines": (
        "newest",
        "--verbose only skips tfinput's filter (the same code on both ends), checked "
        "against what a plain `import tensorflow` prints on that end; the oldest end checks "
        "the quiet side with its own commands (test_commands_print_no_tensorflow_log_lines)",
    ),
}

#: The tests that take over 30 s alone on the 2-core development machine, each with why
#: it cannot be cut further without checking less (every other test stays under 30 s).
#: They are marked ``slow`` here (the quick run leaves them out).
LONG_ALONE: dict[str, str] = {
    "tests/test_examples.py::test_criteo_dcn_converts_tunes_trains_and_serves": (
        "the real 39-column Criteo sample through convert, tune, XLA training and export"
    ),
    "tests/test_examples.py::test_wrap_existing_wraps_and_tunes_an_unchanged_input_fn": (
        "traces a 39-input Keras model twice (tuning and training) on the real Criteo columns"
    ),
    "tests/test_examples.py::test_example_runs": (
        "ranking_dcn.py --quick: two XLA compiles of the ranking step, tune and one epoch"
    ),
    "tests/test_docs_serving.py::test_every_code_block_runs": (
        "docs/serving.md as written: an XLA ranking model trained, exported and served"
    ),
    "tests/test_docs_resume.py::test_every_code_block_runs": (
        "every recipe of docs/resume.md: Keras fit, JAX, MirroredStrategy, check --resume"
    ),
    "tests/test_examples_resume.py::test_resume_jax_example_is_preempted_and_resumes_exactly": (
        "two real processes (killed, then resumed), each importing TensorFlow and JAX"
    ),
    "tests/tfinput/_src/measurement/steps/test_keras.py::test_keras_steps_and_tune_on_the_jax_backend": (
        "one JAX child process: both Keras steps with each feeding knob, and two tunes"
    ),
    "tests/tfinput/test_tpu.py::test_keras_rs_model_trains_on_jax_and_the_format_matrix": (
        "a keras-rs model trained per entry of the input format matrix (9 XLA compiles)"
    ),
    "tests/tfinput/test_tpu.py::test_keras_rs_model_trains_on_tensorflow_and_the_format_matrix": (
        "the same matrix on the TensorFlow backend"
    ),
    "tests/profiles/test_cli.py::test_profile_the_ranking_steps_on_the_jax_backend": (
        "profiles both ranking steps in a JAX child process (TensorFlow and JAX traces)"
    ),
    "tests/tfinput/test_fleet.py::test_the_tuner_searches_the_service_knobs_and_sizes_the_fleet": (
        "starts tf.data service clusters of 1 and 2 worker processes for the tuner to compare"
    ),
    "tests/tfinput/test_resume.py::test_keras_fit_resumes_mid_epoch_on_jax": (
        "Keras fit on JAX in a child process, stopped and resumed mid-epoch"
    ),
    "tests/tfinput/test_models.py::test_ranking_model_takes_packed_batches_with_jit_compile": (
        "one XLA compile of the ranking model per layout it checks"
    ),
    "tests/tfinput/test_retrieval.py::test_two_tower_model_trains_on_jax_under_xla": (
        "a two-tower model trained under XLA in a JAX child process"
    ),
    "tests/tfinput/_src/applications/cli/test_tf_logs.py::test_commands_print_no_tensorflow_log_lines": (
        "its oldest-end group runs `tfinput demo` as a user does (200,000 rows generated, "
        "a trial, the confirmation, the roofline, the columnar sample), then check and "
        "convert, in one process"
    ),
    "tests/test_file_modes.py::test_everything_written_has_the_mode_the_umask_gives": (
        "one process runs every command that writes files (datagen, convert to three "
        "formats, bench, tune, profile, sparsecore, a Keras checkpoint) under two umasks"
    ),
    "tests/test_file_modes.py::test_temporary_files_get_no_more_than_the_umask_allows": (
        "shares the run of every command that writes files under two umasks"
    ),
    "tests/test_open_ports.py::test_serve_prints_where_it_listens_and_that_anyone_who_reaches_it_can_use_it": (
        "two `tfinput serve` processes, each importing TensorFlow, read while they run"
    ),
    "tests/test_open_ports.py::test_a_local_fleet_listens_on_every_interface_and_its_commands_say_so": (
        "a local fleet's dispatcher and worker processes, each importing TensorFlow"
    ),
    "tests/test_open_ports.py::test_the_local_ray_instance_listens_on_every_interface_and_convert_says_so": (
        "starts a local Ray instance (GCS, raylet, a worker) to read its sockets"
    ),
    "tests/tuners/test_storage_postgres.py::test_the_storage_password_shows_nowhere_but_redacted": (
        "three `tfinput tune` processes on PostgreSQL (a report, --json, an unreachable "
        "server), each importing TensorFlow"
    ),
    "tests/tuners/test_storage_postgres.py::test_two_workers_one_killed": (
        "two tuner worker processes on PostgreSQL, one SIGKILLed, trials long enough for "
        "the heartbeat to find it"
    ),
}

#: Modules `./dev test --quick` leaves out besides tests marked ``slow``: end-to-end
#: tests with real processes (examples, doc pages, servers, kills, PostgreSQL, Ray).
END_TO_END = frozenset(ONE_END)

#: Tests that took 3 s or more (call and set-up) in the last recorded full run: the rest
#: of ``--quick``'s leave-outs. Regenerate with ``./dev test --newest --record-slow``.
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
SLOW_SECONDS = 3.0

#: Tests that read through tf.data service servers (or Ray) they stop or kill before
#: their iterators are freed. Deleting such an iterator waits on its client's retries to
#: the gone servers, and Python's garbage collector deletes those left in reference
#: cycles in whatever later test it happens to run in: 10-90 s stalls in unrelated tests,
#: about 400 s of one CI run (measured with TFINPUT_TEST_TIMES below). After each of these
#: tests its garbage is frozen instead (`gc.freeze`: never collected, so never deleted):
#: a few iterators' memory, held until the worker exits. The same for any test that
#: leaves JAX arrays alive when it ends (`_live_jax_arrays` grew: arrays held in reference
#: cycles): a collection that deletes them blocked for 12-40 s with the process idle (CI
#: runs 34 and 35, TFINPUT_GC_STACKS: the collector inside a C-level deallocation, right
#: after in-process JAX tests).
#: The error-path modules too: a stalled collection's native stack (CI run 40,
#: TFINPUT_GC_NATIVE) was deleting a tf.data iterator whose autotuning thread was asleep
#: (`~RootDataset::Iterator` waiting on `Model::OptimizeLoop`), an iterator left in a
#: reference cycle by a pipeline that failed.
#: And the compact-resume module: the one collection after its columnar iterators (in
#: its fourth test on the newest end) blocked for 45-56 s in CI runs 44, 48 and 49.
FREEZE_GARBAGE_AFTER = (
    "tests/tfinput/test_resume_compact.py",
    "tests/test_bad_input.py",
    "tests/tfinput/test_pipeline.py::test_iterate_turns",
    "tests/tfinput/test_fleet.py",
    "tests/tfinput/test_service.py",
    "tests/test_service_faults.py",
    "tests/tfinput/_src/applications/convert/test_ray_engine.py",
    "tests/tfinput/_src/applications/cli/commands/test_bench.py::test_cli_bench_through_a_local_service",
)

#: Tests in which the full collection that deletes earlier tests' garbage kept landing
#: (their ``tf.function`` tracing allocates enough to start one): 23-78 s in one
#: collection in CI runs 47-51, on the newest end. Whatever is garbage when they start is
#: frozen instead, as for `FREEZE_GARBAGE_AFTER`.
FREEZE_GARBAGE_BEFORE = ("tests/tfinput/test_transforms.py",)

END = os.environ.get("TFINPUT_TEST_END", "")
ENDS = ("newest", "oldest")


def _slow_list() -> frozenset[str]:
    if not SLOW_LIST.exists():
        return frozenset()
    lines = (line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text().splitlines())
    return frozenset(line for line in lines if line)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _on_the_other_end(nodeid: str) -> bool:
    """A case of a `SPLIT_CASES` test, or a test of `ONE_END_TESTS`, that this end
    (`END`) leaves to the other."""
    if END not in ENDS:
        return False
    function, _, case = nodeid.partition("[")
    split = SPLIT_CASES.get(function)
    if split is not None and (case.rstrip("]") in split[0]) != (END == "oldest"):
        return True
    one = ONE_END_TESTS.get(nodeid) or ONE_END_TESTS.get(function)
    return one is not None and one[0] != END


def _check_split_cases(items: list[pytest.Item]) -> None:
    """Every case `SPLIT_CASES` lists is a real case of its test, and leaves the newest
    end some (a renamed parameter would otherwise leave an end running none of them);
    every `ONE_END_TESTS` entry is a collected test."""
    seen: dict[str, set[str]] = {}
    ids, modules = set(), set()
    for item in items:
        function, _, case = item.nodeid.partition("[")
        ids.update((item.nodeid, function))
        modules.add(_module(item))
        if function in SPLIT_CASES:
            seen.setdefault(function, set()).add(case.rstrip("]"))
    for function, cases in seen.items():
        listed = SPLIT_CASES[function][0]
        if stale := listed - cases:
            raise pytest.UsageError(
                f"tests/conftest.py SPLIT_CASES: {function} has no case "
                f"{', '.join(sorted(stale))}; its cases are {', '.join(sorted(cases))}"
            )
        if not cases - listed:
            raise pytest.UsageError(
                f"tests/conftest.py SPLIT_CASES: {function} leaves the newest end no case"
            )
    if stale_tests := {t for t in ONE_END_TESTS if t.split("::")[0] in modules} - ids:
        raise pytest.UsageError(
            f"tests/conftest.py ONE_END_TESTS: no such test {', '.join(sorted(stale_tests))}"
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="leave out the end-to-end modules, the tests marked slow and those in "
        "tests/slow_tests.txt",
    )
    parser.addoption(
        "--record-slow",
        action="store_true",
        help=f"rewrite tests/slow_tests.txt with the tests of this run that took "
        f"{SLOW_SECONDS:g} s or more",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quick = config.getoption("--quick")
    slow = _slow_list() if quick else frozenset()
    keep, dropped = [], []
    for item in items:
        if item.nodeid.split("[", 1)[0] in LONG_ALONE:
            item.add_marker(pytest.mark.slow)
        module = _module(item)
        other_end = (
            (module in ONE_END and END in ENDS and ONE_END[module][0] != END)
            or (module in ONE_END_MODULES and END in ENDS and ONE_END_MODULES[module][0] != END)
            or _on_the_other_end(item.nodeid)
        )
        long = quick and (
            module in END_TO_END
            or item.nodeid in slow
            or item.get_closest_marker("slow") is not None
        )
        (dropped if other_end or long else keep).append(item)
    if not any("::" in arg for arg in config.args):  # not when tests are picked by id
        _check_split_cases(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Called in the controlling process for every worker's reports too.
    if report.when in ("setup", "call"):
        _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not session.config.getoption("--record-slow") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = sorted(n for n, t in _seconds.items() if t >= SLOW_SECONDS)
    SLOW_LIST.write_text(
        f"# Tests that took {SLOW_SECONDS:g} s or more (set-up and call) in a full run of the\n"
        "# suite on the 2-core development machine; `./dev test --quick` leaves them out.\n"
        "# Written by `./dev test --newest --record-slow`; edit by hand only to add.\n"
        + "".join(f"{n}\n" for n in slow)
    )


def pytest_report_header(config: pytest.Config) -> str:
    if END not in ENDS:
        return "tfinput: no end named (TFINPUT_TEST_END); runs every test"
    other = "newest" if END == "oldest" else "oldest"
    modules = {**ONE_END, **ONE_END_MODULES}
    left = ", ".join(m for m, (end, _) in sorted(modules.items()) if end == other)
    header = f"tfinput: {END} end; left to the {other} end (tests/conftest.py ONE_END): {left}"
    return header + (
        f"; and {sum(end == other for end, _ in ONE_END_TESTS.values())} tests of "
        f"ONE_END_TESTS, and the {other} end's cases of {len(SPLIT_CASES)} parametrised tests "
        "(SPLIT_CASES)"
    )


def pytest_configure(config: pytest.Config) -> None:
    # Three logical CPU devices, so tf.distribute tests have several replicas. This must
    # happen before TensorFlow initialises its devices, i.e. before any test runs.
    # pytest-xdist's controlling process runs no test: it need not load TensorFlow.
    if not hasattr(config, "workerinput") and (config.getoption("numprocesses", None) or 0):
        return
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    # RuntimeError: already initialised (e.g. by a plugin); the tests adapt.
    with contextlib.suppress(RuntimeError):
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * 3
        )


@pytest.fixture(autouse=True)
def _freeze_service_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    """`FREEZE_GARBAGE_AFTER`: this test's garbage frozen when it ends; also when the
    test left more JAX arrays alive than there were before it. `FREEZE_GARBAGE_BEFORE`:
    the garbage earlier tests left frozen before this one starts."""
    import gc

    if request.node.nodeid.startswith(FREEZE_GARBAGE_BEFORE):
        gc.freeze()
    jax_arrays = _live_jax_arrays()
    yield
    if request.node.nodeid.startswith(FREEZE_GARBAGE_AFTER) or _live_jax_arrays() > jax_arrays:
        gc.freeze()


def _live_jax_arrays() -> int:
    """JAX arrays alive in this process (0 before JAX is imported)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return 0
    try:
        return len(jax.live_arrays())
    except Exception:  # a JAX without live_arrays, or one half imported
        return 0


ROWS = 1000


@pytest.fixture(scope="session")
def small_schema():
    from tfinput import testing

    return testing.small_schema()


@pytest.fixture(scope="session")
def small_columns(small_schema):
    from tfinput import testing

    return testing.generate(small_schema, ROWS, seed=7, max_list_len=8)


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory shared by every process of this test run (pytest-xdist's workers
    each have their own base temporary directory, under a common parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_files(
    tmp_path_factory: pytest.TempPathFactory, name: str, write: Callable[[Path], list[str]]
) -> list[str]:
    """Files written once per test run and read by every worker: ``write(directory)``
    runs in the first process that asks (the others wait on a lock), later ones read
    the list of files it returned."""
    root = _run_root(tmp_path_factory) / "shared-data"
    root.mkdir(exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        listing = root / f"{name}.json"
        if listing.exists():
            return json.loads(listing.read_text())
        directory = root / name
        shutil.rmtree(directory, ignore_errors=True)  # a worker stopped mid-write
        directory.mkdir()
        files = [str(f) for f in write(directory)]
        listing.write_text(json.dumps(files))
        return files


@pytest.fixture(scope="session")
def small_tfrecord(tmp_path_factory, small_schema, small_columns):
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "tfrecord",
        lambda d: testing.write_tfrecord(
            d, small_schema, rows=ROWS, files=4, columns=small_columns
        ),
    )


@pytest.fixture(scope="session")
def small_parquet(tmp_path_factory, small_schema, small_columns):
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "parquet",
        lambda d: testing.write_parquet(
            d, small_schema, rows=ROWS, files=4, columns=small_columns, row_group_size=100
        ),
    )


@pytest.fixture(scope="session")
def small_columnar(tmp_path_factory, small_schema, small_columns):
    """The same rows as columnar records: chunks of 100 rows, files of 300, 300, 300, 100."""
    from tfinput import testing

    return shared_files(
        tmp_path_factory,
        "columnar",
        lambda d: testing.write_columnar(
            d, small_schema, rows=ROWS, files=4, chunk_rows=100, columns=small_columns
        ),
    )


@pytest.fixture(scope="session")
def pipeline_of(small_schema, small_columns, small_tfrecord, small_parquet, small_columnar):
    """``pipeline_of(kind)``: a pipeline over the shared 1000 rows for each kind in
    `tests.helpers.SOURCE_KINDS` (``wrapped_batched``: the user's dataset batches by 50).

    A module that runs over every source parametrizes its own ``pipeline`` fixture::

        @pytest.fixture(params=SOURCE_KINDS)
        def pipeline(request, pipeline_of):
            return pipeline_of(request.param)
    """
    import tfinput
    from tests.helpers import wrapped_dataset

    def make(kind: str):
        if kind == "tfrecord":
            return tfinput.tfrecord(small_tfrecord, small_schema)
        if kind == "parquet":
            return tfinput.parquet(small_parquet, small_schema)
        if kind == "columnar":
            return tfinput.columnar(small_columnar, small_schema)
        if kind == "wrapped":
            return tfinput.wrap(lambda: wrapped_dataset(small_columns), small_schema)
        if kind == "wrapped_batched":
            return tfinput.wrap(
                lambda: wrapped_dataset(small_columns).ragged_batch(50, drop_remainder=True),
                small_schema,
                batched=True,
            )
        raise ValueError(f"unknown source kind {kind!r}")

    return make


#: The watchdog of TFINPUT_GC_NATIVE (argv: pid, flag file, output file): once per
#: collection that has run 5 s, gdb's backtrace of every thread, appended to the output.
_GC_WATCHDOG = """
import os, struct, subprocess, sys, time
pid, flag, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dumped = 0.0
while True:
    try:
        os.kill(pid, 0)
        with open(flag, "rb") as f:
            running, started = struct.unpack("<dd", f.read(16))
    except (OSError, struct.error):
        break
    if running and started != dumped and time.time() - started > 5:
        dumped = started
        with open(out, "a") as f:
            f.write("\\nNATIVE %s: a collection running %.0f s\\n" % (time.ctime(), time.time() - started))
            f.flush()
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", "thread apply all bt 25"], stdout=f, stderr=subprocess.STDOUT,
                           timeout=120)
    time.sleep(1)
"""


# ------------------------------------------------------------- where a test's time goes
# TFINPUT_TEST_TIMES=FILE: one JSON line per test (appended, every pytest worker) with
# its wall seconds, the CPU seconds of its process (all threads) and the seconds spent
# in Python's garbage collector, to tell a test that waits from one that computes.
_TIMES = os.environ.get("TFINPUT_TEST_TIMES")
if _TIMES:
    import faulthandler  # here: a collection at interpreter exit cannot import it
    import gc
    import time

    _gc = {"seconds": 0.0, "full": 0, "started": 0.0}
    # TFINPUT_GC_STACKS=FILE as well: every thread's Python stack written to FILE when
    # one garbage collection has run for 5 s (what the collector is stuck deleting).
    _stacks = None
    if "TFINPUT_GC_STACKS" in os.environ:  # one file per end and worker
        _worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _stacks = open(f"{os.environ['TFINPUT_GC_STACKS']}.{END or 'all'}.{_worker}", "a")  # noqa: SIM115

    # TFINPUT_GC_NATIVE=1 as well: also the native (C/C++) stacks of every thread, from
    # gdb, run by a watchdog process (the collector holds the GIL, so no Python thread
    # of this process could start it): what a collection blocked inside TensorFlow waits
    # on. The collector's state goes to the watchdog through a shared 16-byte file.
    _native = None
    if _stacks is not None and os.environ.get("TFINPUT_GC_NATIVE") and shutil.which("gdb"):
        import mmap
        import struct
        import subprocess

        _flag_path = f"{_stacks.name}.flag"
        with open(_flag_path, "wb") as f:
            f.write(bytes(16))
        _flag_file = open(_flag_path, "r+b")  # noqa: SIM115
        _native = mmap.mmap(_flag_file.fileno(), 16)
        subprocess.Popen(
            [sys.executable, "-c", _GC_WATCHDOG, str(os.getpid()), _flag_path, _stacks.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            _gc["started"] = time.perf_counter()
            if _stacks is not None:
                faulthandler.dump_traceback_later(5, file=_stacks)
            if _native is not None:
                _native[:16] = struct.pack("<dd", 1.0, time.time())
        else:
            _gc["seconds"] += time.perf_counter() - _gc["started"]
            _gc["full"] += info.get("generation") == 2
            if _stacks is not None:
                faulthandler.cancel_dump_traceback_later()
            if _native is not None:
                _native[:16] = bytes(16)

    gc.callbacks.append(_on_gc)

    def _threads() -> dict[str, tuple[str, float]]:
        """CPU seconds of each thread of this process so far: tid -> (name, seconds)."""
        out = {}
        for task in Path("/proc/self/task").glob("*"):
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            out[task.name] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        return out

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
        wall, cpu = time.perf_counter(), time.process_time()
        children = os.times()
        gc_s, full = _gc["seconds"], _gc["full"]
        before = _threads()
        yield
        after = _threads()
        busy: dict[str, float] = {}
        for tid, (name, seconds) in after.items():
            spent = seconds - before.get(tid, (name, 0.0))[1]
            busy[name] = busy.get(name, 0.0) + spent
        top = sorted(busy.items(), key=lambda kv: -kv[1])[:6]
        record = {
            "test": item.nodeid,
            "end": END,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
            "wall": round(time.perf_counter() - wall, 2),
            "cpu": round(time.process_time() - cpu, 2),
            # CPU of the child processes the test started and waited for (commands,
            # examples, servers, JAX children)
            "child_cpu": round(
                os.times().children_user
                + os.times().children_system
                - children.children_user
                - children.children_system,
                2,
            ),
            "gc": round(_gc["seconds"] - gc_s, 2),
            "full_gcs": _gc["full"] - full,
            "objects": len(gc.get_objects()) if time.perf_counter() - wall > 20 else None,
            "threads": len(after),
            "busiest": [(n, round(t, 1)) for n, t in top if t >= 0.5],
        }
        with open(_TIMES, "a") as f:
            f.write(json.dumps(record) + "\n")
