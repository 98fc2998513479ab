"""`tuners._report`: the tuning outputs (best_config.json, result.json, report.html, with
or without plotly) and the terminal summary."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import tfinput
from tests.tuners.conftest import BEST, TUNED_TRIALS, config_stats, small_disk, tune_result
from tfinput.config import PipelineConfig
from tuners._report import (
    NO_PLOTLY,
    has_plotly,
    print_summary,
    ranking_notes,
    verdict_lines,
    write_html,
    write_outputs,
)
from tuners._result import TuneOutputError


def test_outputs_load_into_build(tuned, tmp_path):
    pipeline, _, result = tuned
    paths = write_outputs(result, tmp_path / "out")
    config = PipelineConfig.from_json(paths["best_config"])
    assert config == result.best_config
    saved = json.loads(paths["best_config"].read_text())
    assert saved["fingerprint"]["cpu_model"] and "trial" in saved["method"]
    features, _ = next(iter(pipeline.build(config)))
    if tfinput.layout.is_packed(features):  # the winner may pack: its layout is saved
        layout = tfinput.layout.PackedLayout.from_dict(saved["packed_layout"])
        features = tfinput.layout.unpack(features, layout)
    assert features["ids"]["history"].shape == (50, 5)
    html = paths["report"].read_text()
    assert "<html" in html and "plotly" in html.lower() and "Best config" in html
    data = json.loads(paths["result"].read_text())
    assert len(data["trials_detail"]) == TUNED_TRIALS and data["format"] == "tfinput.tune/1"


def test_outputs_without_a_study_or_html(tmp_path):
    paths = write_outputs(tune_result(), tmp_path / "out", html=False)
    assert set(paths) == {"best_config", "result"} and not (tmp_path / "out/report.html").exists()
    assert PipelineConfig.from_json(paths["best_config"]) == BEST
    data = json.loads(paths["result"].read_text())
    assert "trials_detail" not in data and data["best_name"] == "trial 3"


def test_report_without_plotly(tmp_path, monkeypatch):
    for name in [m for m in list(sys.modules) if m.split(".")[0] == "plotly"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)
    assert not has_plotly()
    result = tune_result(warnings=("3 failed trials in a row",), advice=("scale the rate",))
    html = write_outputs(result, tmp_path / "out")["report"].read_text()
    assert NO_PLOTLY in html and "pip install 'tfinput[plots]'" in html
    assert "Confirmed throughput" in html and "<td>trial 3</td><td>1,500</td>" in html
    assert "Warning: 3 failed trials in a row" in html and "Advice: scale the rate" in html
    assert "Best config" in html and "1.50x autotune" in html


def test_verdict_lines_say_how_the_input_wait_was_obtained():
    verdicts = ("trial 3 beats autotune", "the step waits for input 25% of the time")
    measured = tune_result(verdicts=verdicts, input_wait_source="measured")
    assert verdict_lines(measured) == list(verdicts)
    bound = tune_result(verdicts=verdicts, input_wait_source="step bound", step_bound=33333.3)
    assert verdict_lines(bound)[:2] == list(verdicts)
    assert verdict_lines(bound)[2] == (
        "(the step owns the loop, so the input wait is 1 - fed / step bound; step bound "
        "33,333 examples/s on one cached batch)"
    )


def test_print_summary_table_changed_knobs_and_warnings():
    console = Console(record=True, width=200)
    print_summary(tune_result(warnings=("confirmation attempt 1 of 2 failed",)), console)
    text = console.export_text()
    assert "Confirmed throughput (step: input only), ranked by the paired ratio to autotune" in text
    assert "median examples/s" in text and "paired ratio to autotune (rounds)" in text
    assert "1.50x (1.20-1.80)" in text
    assert "paired ratio: each round's examples/s over autotune's in the same round" in text
    assert "best: trial 3; knobs changed from autotune: " in text and "prefetch=4" in text
    assert "study s: 4 complete, 1 pruned; search 10 s, confirmation 2 s" in text
    assert "warning: confirmation attempt 1 of 2 failed" in text


def test_the_summary_says_which_figure_is_the_median_and_which_the_paired_ratio(tmp_path):
    """trial 5 is 1.07x autotune paired (rounds 0.75x-1.12x) with a median below
    autotune's; trial 3 ranks first by the paired ratio with a lower median than trial
    5's. Each is said, in the terminal and in the report."""
    auto = config_stats("autotune", 1.0, 1.0, 1.0)
    first = config_stats("trial 3", 1.10, 1.02, 1.20, config=BEST)
    second = dataclasses.replace(config_stats("trial 5", 1.07, 0.75, 1.12), median=1150.0)
    lower = dataclasses.replace(config_stats("trial 6", 1.04, 0.95, 1.10), median=980.0)
    result = tune_result(confirmed=(first, second, lower, auto), beats_autotune=True)
    assert ranking_notes(result) == [
        "trial 6: 1.04x autotune paired, while its median examples/s, 980, is below "
        "autotune's 1,000: the rounds disagree (a round's load moves both configs of that "
        "round alike, so the paired ratio is the figure compared)",
        "trial 3 ranks first by the paired ratio (1.10x) though trial 5 has the higher "
        "median examples/s (1,150 against 1,100): the configs are ranked, and the verdict "
        "taken, on the paired ratio",
    ]
    console = Console(record=True, width=400)
    print_summary(result, console)
    text = console.export_text()
    assert all(note in text for note in ranking_notes(result))
    html = write_html(result, tmp_path / "report.html").read_text()
    assert "trial 3 ranks first by the paired ratio (1.10x)" in html
    assert "confirmed median 1,100 examples/s, 1.10x autotune paired" in html


def test_print_summary_of_an_unconfirmed_result():
    console = Console(record=True, width=200)
    print_summary(tune_result(confirmed=(), confirmation_error="device lost"), console)
    text = console.export_text()
    assert "confirmation failed: device lost; the best config is the search's best trial " in text
    assert "(trial 3), not confirmed against autotune" in text
    assert "knobs changed" not in text


def test_a_group_that_hurts_is_flagged_in_the_terminal_and_the_report(tmp_path):
    from tfinput.config import AUTOTUNE
    from tuners._advice import KnobContribution

    hurts = KnobContribution(
        group="tf.data threading",
        knobs={"map_parallelism": (10, AUTOTUNE)},
        ratio=0.92,
        ratio_min=0.64,
        ratio_max=0.98,
        without_examples_per_s=1.2e6,
    )
    result = tune_result(breakdown=(hurts,))
    console = Console(record=True, width=250)
    print_summary(result, console)
    advice = "keep them at autotune (tune again with --fix map_parallelism=autotune)"
    assert advice in console.export_text()
    html = write_outputs(result, tmp_path / "out")["report"].read_text()
    assert advice in html


# ----------------------------------------------------- importances and labels
def _study(windows):
    """An in-memory study of complete trials over two knobs; ``windows`` holds each
    trial's ``(min, median, max)`` examples/s."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    study = optuna.create_study(direction="maximize")
    dists = {
        "prefetch": CategoricalDistribution(["autotune", 1, 2]),
        "map_parallelism": CategoricalDistribution(["autotune", 1, 2]),
    }
    for i, (low, median, high) in enumerate(windows):
        study.add_trial(
            optuna.trial.create_trial(
                params={"prefetch": ["autotune", 1, 2][i % 3], "map_parallelism": [1, 2][i % 2]},
                distributions=dists,
                value=median,
                user_attrs={
                    "median_examples_per_s": median,
                    "min_examples_per_s": low,
                    "max_examples_per_s": high,
                },
            )
        )
    return study


#: Trials whose window ranges all overlap (a demo's noise), and trials that differ.
WITHIN_NOISE = [(900, 1000, 1200), (950, 1050, 1150), (1000, 1100, 1250), (880, 990, 1010)]
BEYOND_NOISE = [(900, 1000, 1100), (1500, 1600, 1700), (950, 1020, 1080), (1550, 1650, 1720)]


def test_importances_left_out_when_the_trials_do_not_differ_beyond_the_noise(tmp_path):
    from html import escape

    from tuners._report import importances_left_out

    result = tune_result(study=_study(WITHIN_NOISE))
    reason = importances_left_out(result)
    assert reason == (
        "importances left out: the 4 complete trials do not differ beyond the noise (the "
        "highest slowest window, trial 2's 1,000 examples/s, is not above the lowest "
        "fastest window, trial 3's 1,010: every trial's window range overlaps every "
        "other's), so a ranking of the knobs would rank noise"
    )
    html = write_outputs(result, tmp_path / "out")["report"].read_text()
    assert "Parameter importances" in html and escape(reason) in html
    assert "Hyperparameter Importances" not in html  # Optuna's plot title


def test_importances_drawn_when_the_trials_differ_beyond_the_noise(tmp_path):
    from tuners._report import importances_left_out

    result = tune_result(study=_study(BEYOND_NOISE))
    assert importances_left_out(result) is None
    html = write_outputs(result, tmp_path / "out")["report"].read_text()
    assert "importances left out" not in html
    if has_plotly():
        assert "Hyperparameter Importances" in html
    one = tune_result(study=_study(BEYOND_NOISE[:1]))
    assert importances_left_out(one) == (
        "importances left out: 1 complete trial(s); importances need trials that differ"
    )


def test_every_table_shows_autotune_as_autotune_never_minus_one(tmp_path):
    from tfinput.config import AUTOTUNE
    from tuners._advice import KnobContribution
    from tuners._space import label

    helps = KnobContribution(
        group="buffering",
        knobs={"prefetch": (2, AUTOTUNE)},
        ratio=1.3,
        ratio_min=1.2,
        ratio_max=1.4,
        without_examples_per_s=1.0e5,
    )
    assert helps.describe().startswith("buffering (prefetch autotune→2): 1.30x")
    result = tune_result(breakdown=(helps,), study=_study(BEYOND_NOISE))
    console = Console(record=True, width=250)
    print_summary(result, console)
    text = console.export_text()
    assert "prefetch autotune→2" in text and "prefetch=4" in text
    html = write_outputs(result, tmp_path / "out")["report"].read_text()
    assert "prefetch: autotune → 2" in html
    table = html[html.index("<h2>Gain by knob</h2>") :].split("</table>")[0]
    for shown in (text, table):
        assert "-1→" not in shown and "-1 →" not in shown and "=-1" not in shown
    assert [label(v) for v in (AUTOTUNE, 4, True, None)] == ["autotune", "4", "True", "none"]


#: Writes a tune result's outputs with files limited to 1 MB (``RLIMIT_FSIZE``: a real
#: "File too large" from the kernel), where no small disk can be mounted.
FILE_SIZE_LIMITED = """\
import resource, signal, sys
from tests.tuners.conftest import tune_result
from tuners._report import write_outputs
from tuners._result import TuneOutputError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))
try:
    write_outputs(tune_result(), sys.argv[1])
except TuneOutputError as e:
    print(e)
"""


def test_outputs_on_a_full_disk_are_whole_or_absent_and_the_error_names_the_file(tmp_path):
    """report.html (plotly.js inlined: about 5 MB) on a 1 MB disk: the JSON files are
    written whole first, the report is left out whole, no partial file stays, and the
    error names the report, the reason and the files kept."""
    assert has_plotly()  # the report is large: it inlines plotly.js
    with small_disk(tmp_path / "disk", "1m") as disk:
        if disk is not None:
            with pytest.raises(TuneOutputError) as raised:
                write_outputs(tune_result(), disk / "out")
            _assert_whole_or_absent(disk / "out", str(raised.value), "No space left on device")
            return
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )
    _assert_whole_or_absent(out, done.stdout.strip(), "File too large")


def _assert_whole_or_absent(out, message, reason):
    assert re.fullmatch(
        rf"cannot write {re.escape(str(out))}/report.html \(\d\.\d MB\): {reason}; nothing "
        rf"partial was left there; best_config.json and result.json are written in "
        rf"{re.escape(str(out))}",
        message,
    ), message
    assert sorted(os.listdir(out)) == ["best_config.json", "result.json"]
    assert PipelineConfig.from_json(out / "best_config.json") == BEST
    assert json.loads((out / "result.json").read_text())["best_name"] == "trial 3"
