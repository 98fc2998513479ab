"""`tuners._advice`: the verdicts (beats autotune beyond the noise, input-bound or not),
the step bound and the gain by knob group."""

from __future__ import annotations

import collections
import dataclasses
import json

import pytest

from tests.tuners.conftest import FakeWorkload, config_stats, rate_by_parallelism
from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput._src.measurement.windows import WindowPlan
from tfinput.config import AUTOTUNE, PipelineConfig
from tuners._advice import (
    KnobContribution,
    beats_autotune,
    differing_groups,
    input_verdict,
    step_bound,
)
from tuners._report import write_outputs
from tuners._search import baseline_configs
from tuners._space import SearchSpace

# ----------------------------------------------------------------- verdicts
AUTOTUNE_STATS = config_stats("autotune", 1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    "confirmed, beats, words",
    [
        ([config_stats("trial 7", 1.3, 1.1, 1.5), AUTOTUNE_STATS], True, "beats"),
        (
            [config_stats("trial 7", 1.06, 0.96, 1.12), AUTOTUNE_STATS],
            False,
            "keep autotune: trial 7's gain is within the noise (1.06x autotune paired, rounds "
            "0.96x-1.12x; the spread includes 1)",
        ),
        ([config_stats("trial 7", 1.2, 1.0, 1.3), AUTOTUNE_STATS], False, "keep autotune"),
        (
            [AUTOTUNE_STATS, config_stats("trial 2", 0.9, 0.8, 0.95)],
            False,
            "keep autotune: it measured best in the confirmation, ahead of trial 2 (paired "
            "ratio, round by round)",
        ),
        # Nothing else was measured: no verdict names a comparison that did not happen.
        (
            [AUTOTUNE_STATS],
            None,
            "no verdict: autotune was the only config confirmed; no other config was "
            "measured against it",
        ),
        ([], None, "not confirmed"),
    ],
    ids=[
        "spread-above-1",
        "spread-straddles-1",
        "spread-touches-1",
        "autotune-wins",
        "autotune-alone",
        "none",
    ],
)
def test_beats_autotune_only_when_the_paired_spread_excludes_1(confirmed, beats, words):
    verdict, sentence = beats_autotune(confirmed)
    assert verdict is beats and words in sentence


def test_beats_autotune_gives_no_verdict_from_one_round():
    from tfinput._src.measurement.windows import Window

    one = Window(
        batches=4,
        examples=4096,
        seconds=0.01,
        cpu_seconds=0.01,
        batch_seconds=(),
        wait_seconds=None,
    )
    best = dataclasses.replace(config_stats("heuristic", 1.2, 1.2, 1.2), windows=(one,))
    verdict, sentence = beats_autotune([best, AUTOTUNE_STATS])
    assert verdict is None
    assert "one confirmation round cannot tell heuristic's 1.20x autotune" in sentence
    assert "--confirm-windows 3" in sentence


@pytest.mark.parametrize(
    "waits, bound, words",
    [
        ([0.01, 0.012, 0.008], False, "input is not your bottleneck: tuning it will not speed"),
        ([0.02, 0.029, 0.05], False, "waited for input 2.9% of the time, rounds 2.0%-5.0%"),
        ([0.03, 0.04, 0.031], True, "waits for input 3% of the time (rounds 3.0%-4.0%, every"),
        ([0.4, 0.35, 0.5], True, "the input pipeline bounds training"),
        ([0.01, 0.05, 0.2], None, "cannot tell whether input bounds training: the step waited"),
        ([0.3], None, "one round has no spread"),
        (None, None, "could not be measured"),
    ],
)
def test_input_verdict_from_measured_waits(waits, bound, words):
    verdict, sentence = input_verdict(waits)
    assert verdict is bound and words in sentence
    assert input_verdict([0.5, 0.5], input_only=True)[0] is None


@pytest.mark.parametrize(
    "fed, bound, verdict, words",
    [
        # ./dev demo's case: fed 69k against 72k, rounds spread by ~8%: within the noise.
        ((64e3, 69e3, 74e3), (66e3, 72e3, 78e3), False, "the step bound is reached within its"),
        ((70e3, 71e3, 72e3), (72e3, 72e3, 73e3), False, "input is not your bottleneck"),
        ((50e3, 52e3, 55e3), (70e3, 72e3, 75e3), True, "about 28% of the time"),
        ((50e3, 52e3, 71e3), (70e3, 72e3, 75e3), None, "the rounds overlap"),
        ((50e3,), (70e3, 72e3), None, "one round has no spread"),
    ],
)
def test_input_verdict_from_the_step_bound_compares_the_rounds(fed, bound, verdict, words):
    got, sentence = input_verdict(fed=fed, bound=bound)
    assert got is verdict and words in sentence, sentence


def test_step_bound_feeds_one_cached_batch():
    # The step costs 4 ms of fake time per batch of 100 rows; the input is fetched once
    # per window and its batch repeated.
    work = FakeWorkload(lambda config: 100 / 0.004, wobble=0.0)
    fetched = []

    def source(config):
        for batch in work(config):
            fetched.append(1)
            yield batch

    bound = step_bound(
        Target.of(source),
        PipelineConfig(batch_size=100, drop_remainder=True),
        work.step,
        measurement=MeasureOptions(
            windows=2, window_batches=3, warmup_batches=1, clock=work.clock, cpu_clock=lambda: 0.0
        ),
    )
    assert bound == pytest.approx(25_000)
    # a fresh iterator per window fetches one batch; the step runs warm-up and window
    assert len(fetched) == 2 and work.steps == 2 * (1 + 3)


def test_a_step_much_slower_than_the_input_is_told_input_is_not_the_bottleneck(tmp_path):
    from rich.console import Console

    from tuners._report import print_summary

    # The fake step takes all the (fake) time; fetching a batch takes none.
    work = FakeWorkload(rate_by_parallelism, wobble=0.0)
    result = work.tune(n_trials=5, lock_path=str(tmp_path / "lock"), breakdown=False)
    assert result.input_wait == 0.0 and result.input_wait_source == "measured"
    assert result.input_bound is False and result.step_bound is None
    assert (
        "input is not your bottleneck: tuning it will not speed up training" in (result.verdicts[1])
    )
    console = Console(record=True, width=200)
    print_summary(result, console)
    text = console.export_text()
    assert "verdict: input is not your bottleneck" in text
    data = result.to_dict()
    assert data["input_bound"] is False and data["verdicts"] == list(result.verdicts)
    assert result.record()["verdicts"] == list(result.verdicts)


class WithinTheNoise(FakeWorkload):
    """Autotune feeds 100k examples/s; every config with another ``map_parallelism``
    feeds 1.3x or 0.9x that on alternate fresh iterators of it: measured best on average
    (1.1x), but slower than autotune in one round of every two."""

    def __init__(self):
        super().__init__(lambda config: 100_000.0, wobble=0.0)
        self.iterators = collections.Counter()

    def __call__(self, config):
        n = self.iterators[config]
        self.iterators[config] += 1
        factor = 1.0 if config.map_parallelism == AUTOTUNE else (1.3, 0.9)[n % 2]
        cost = config.batch_size / (100_000.0 * factor)

        def batches():
            while True:
                yield {"cost": cost, "config": config, "rows": config.batch_size}

        return batches()


def test_keep_autotune_saves_autotune_and_keeps_the_measured_best_in_the_result(tmp_path):
    from rich.console import Console

    from tuners._report import print_summary

    work = WithinTheNoise()
    result = work.tune(n_trials=4, lock_path=str(tmp_path / "lock"), breakdown=False)
    measured = result.confirmed[0]
    assert result.beats_autotune is False and measured.name != "autotune"
    assert (measured.ratio, measured.ratio_min, measured.ratio_max) == pytest.approx(
        (1.1, 0.9, 1.3)
    )
    assert result.verdicts[0] == (
        f"keep autotune: {measured.name}'s gain is within the noise (1.10x autotune paired, "
        "rounds 0.90x-1.30x; the spread includes 1)"
    )
    # the saved config is the verdict: autotune, as the study measured it
    autotune = baseline_configs(PipelineConfig(batch_size=100, drop_remainder=True), cpu_count=2)
    assert result.best_name == "autotune" and result.best_config == autotune["autotune"]
    assert result.kept_autotune and result.measured_best is measured
    assert result.ratio_vs_autotune == 1.0
    paths = write_outputs(result, tmp_path / "out")
    assert PipelineConfig.from_json(paths["best_config"]) == autotune["autotune"]
    saved = json.loads(paths["best_config"].read_text())
    assert saved["confirmed"]["name"] == "autotune" and saved["beats_autotune"] is False
    data = json.loads(paths["result"].read_text())
    assert data["best_name"] == "autotune" and data["ratio_vs_autotune"] == 1.0
    assert data["best_config"] == autotune["autotune"].to_dict()
    best = data["measured_best"]
    assert best["name"] == measured.name and best["saved"] is False
    assert best["config"] == measured.config.to_dict() != data["best_config"]
    assert best["vs_baseline"] == {"ratio": 1.1, "min": 0.9, "max": 1.3}
    console = Console(record=True, width=300)
    print_summary(result, console)
    text = console.export_text()
    changed = ", ".join(
        f"{k}={v}"
        for k, v in measured.config.to_dict().items()
        if autotune["autotune"].to_dict()[k] != v
    )
    assert (
        f"saved: autotune (the verdict); measured best: {measured.name}, 1.10x autotune "
        f"paired (rounds 0.90x-1.30x), knobs changed from autotune: {changed}"
    ) in text
    html = paths["report"].read_text()
    assert "Saved: autotune (the verdict: keep autotune)" in html


def test_a_winner_beyond_the_noise_is_saved_and_is_the_measured_best(tmp_path):
    work = FakeWorkload(rate_by_parallelism, wobble=0.0)
    result = work.tune(n_trials=5, lock_path=str(tmp_path / "lock"), breakdown=False)
    assert result.beats_autotune is True and not result.kept_autotune
    assert result.best_name == result.confirmed[0].name != "autotune"
    assert result.to_dict()["measured_best"]["saved"] is True
    assert result.record()["confirmed"]["name"] == result.best_name


# -------------------------------------------------------------- gain by knob
def _rate_by_map_and(prefetch_4):
    """A rate function: map_parallelism 4 doubles the rate, prefetch 4 multiplies it by
    ``prefetch_4``: known contributions."""

    def rate(config):
        rate = 100_000.0
        rate *= 2.0 if config.map_parallelism == 4 else 1.0
        rate *= prefetch_4 if config.prefetch == 4 else 1.0
        return rate

    return rate


_rate_by_map_and_prefetch = _rate_by_map_and(1.5)  # prefetch 4 adds half


def test_the_gain_is_broken_down_by_knob_group(tmp_path):
    work = FakeWorkload(_rate_by_map_and_prefetch, wobble=0.02)
    best = PipelineConfig(batch_size=100, drop_remainder=True, map_parallelism=4, prefetch=4)
    kwargs = dict(
        n_trials=4,
        current=best,
        space=SearchSpace(choices={"map_parallelism": (1, 4), "prefetch": (1, 4)}),
        lock_path=str(tmp_path / "lock"),
    )
    result = work.tune(**kwargs)
    assert result.best_name == "current" and result.beats_autotune is True
    assert "current beats autotune beyond the noise (3.00x autotune" in result.verdicts[0]
    by_group = {c.group: c for c in result.breakdown}
    assert set(by_group) == {"tf.data threading", "buffering"}
    assert by_group["tf.data threading"].knobs == {"map_parallelism": (4, AUTOTUNE)}
    assert by_group["buffering"].knobs == {"prefetch": (4, AUTOTUNE)}
    assert by_group["tf.data threading"].ratio == pytest.approx(2.0, rel=0.05)
    assert by_group["buffering"].ratio == pytest.approx(1.5, rel=0.05)
    assert [c.group for c in result.breakdown] == ["tf.data threading", "buffering"]
    paths = write_outputs(result, tmp_path / "out")
    data = json.loads(paths["result"].read_text())
    assert [b["group"] for b in data["breakdown"]] == ["tf.data threading", "buffering"]
    assert data["breakdown"][0]["knobs"] == {
        "map_parallelism": {"winner": 4, "autotune": "autotune"}
    }
    html = paths["report"].read_text()
    assert "Gain by knob" in html and "Verdict" in html and "beats autotune" in html

    assert work.tune(**kwargs, breakdown=False).breakdown == ()


_rate_where_prefetch_hurts = _rate_by_map_and(0.8)  # prefetch 4 costs a fifth


def test_a_group_slower_in_every_round_is_reverted_and_the_best_measured_is_saved(tmp_path):
    work = FakeWorkload(_rate_where_prefetch_hurts, wobble=0.02)
    # The search can only propose map_parallelism 4 with prefetch 4.
    result = work.tune(
        n_trials=4,
        space=SearchSpace(choices={"map_parallelism": (4,), "prefetch": (4,)}),
        lock_path=str(tmp_path / "lock"),
    )
    by_group = {c.group: c for c in result.breakdown}
    buffering, threading = by_group["buffering"], by_group["tf.data threading"]
    assert buffering.hurts and buffering.reverted is True
    assert not threading.hurts and threading.reverted is None
    assert "reverted to autotune's values in the best measured config" in buffering.describe()
    # The saved config is the winner with prefetch back at autotune: 200k against 160k,
    # measured in the same windows as the search's winner and autotune.
    assert result.best_config.map_parallelism == 4 and result.best_config.prefetch == AUTOTUNE
    assert result.best_name.endswith("with buffering at autotune")
    assert {c.name for c in result.confirmed} >= {"autotune", result.best_name}
    assert len(result.confirmed) == 3  # autotune, the search's winner, the reverted one
    best = next(c for c in result.confirmed if c.name == result.best_name)
    assert best.median == pytest.approx(200_000, rel=0.05)
    assert any("buffering: slower in every round" in w for w in result.warnings)
    data = result.to_dict()
    assert data["best_config"]["prefetch"] == "autotune"
    assert data["breakdown"][1]["reverted"] is True or data["breakdown"][0]["reverted"] is True


def test_knob_groups_revert_together():
    auto = baseline_configs(PipelineConfig(batch_size=64), cpu_count=2)["autotune"]
    winner = auto.replace(
        map_parallelism=3,
        interleave_cycle_length=2,
        deterministic=True,  # the same pipeline as autotune's deterministic
        layout="packed",
        steps_per_execution=8,
        batch_size=128,
    )
    groups = differing_groups(winner, auto)
    assert list(groups) == ["tf.data threading", "batch_size", "layout", "steps_per_execution"]
    assert groups["tf.data threading"] == {
        "interleave_cycle_length": (2, AUTOTUNE),
        "map_parallelism": (3, AUTOTUNE),
    }
    assert differing_groups(auto.replace(layout=None), auto) == {}  # None: the pipeline's own


def test_knob_contribution_describes_itself():
    c = KnobContribution(
        group="buffering",
        knobs={"prefetch": (4, AUTOTUNE)},
        ratio=1.5,
        ratio_min=1.4,
        ratio_max=1.61234,
        without_examples_per_s=12345.678,
    )
    assert c.describe() == "buffering (prefetch autotune→4): 1.50x (rounds 1.40x-1.61x)"
    assert c.to_dict() == {
        "group": "buffering",
        "knobs": {"prefetch": {"winner": 4, "autotune": "autotune"}},
        "ratio": 1.5,
        "ratio_min": 1.4,
        "ratio_max": 1.612,
        "without_examples_per_s": 12345.7,
        "hurts": False,
        "reverted": None,
    }


def test_a_knob_group_slower_in_every_round_says_how_to_pin_it():
    # Seen on an H100 (benchmarks/RESULTS.md): the winner's tf.data threading knobs
    # measured 0.92x (rounds 0.64x-0.98x) against autotune's.
    c = KnobContribution(
        group="tf.data threading",
        knobs={"map_parallelism": (10, AUTOTUNE), "deterministic": (False, True)},
        ratio=0.92,
        ratio_min=0.64,
        ratio_max=0.98,
        without_examples_per_s=1e6,
    )
    assert c.hurts and c.to_dict()["hurts"] is True
    assert c.describe().endswith(
        "; slower with these knobs in every round: keep them at autotune (tune again with "
        "--fix map_parallelism=autotune --fix deterministic=true)"
    )
    assert not dataclasses.replace(c, ratio_max=1.02).hurts  # the spread includes 1


# ----------------------------------------------- the longer confirmation
def _rounds(name, rates):
    """A confirmed config whose windows measured ``rates``, one per round."""
    from tfinput._src.measurement.windows import Window

    windows = tuple(
        Window(
            name=name,
            round=i,
            batches=1,
            examples=int(rate),
            seconds=1.0,
            cpu_seconds=0.0,
            batch_seconds=(1.0,),
            wait_seconds=0.0,
        )
        for i, rate in enumerate(rates)
    )
    ratios = [r / 1000.0 for r in rates]
    median = sorted(ratios)[len(ratios) // 2]
    return dataclasses.replace(
        config_stats(name, median, min(ratios), max(ratios)), windows=windows
    )


def test_rounds_allowed_below_keep_the_false_win_rate_of_five_rounds_all_above():
    from tuners._advice import FALSE_WIN_RATE, rounds_allowed_below

    assert FALSE_WIN_RATE == 1 / 32  # five rounds all above 1 by chance
    assert [rounds_allowed_below(n) for n in range(1, 9)] == [0] * 8
    assert [rounds_allowed_below(n) for n in (9, 10, 12, 15)] == [1, 1, 2, 3]


@pytest.mark.parametrize(
    ("below", "beats", "words"),
    [
        (
            1,
            True,
            "trial 7 beats autotune beyond the noise (1.15x autotune paired, rounds "
            "0.95x-1.20x; 9 of 10 rounds above 1)",
        ),
        (2, False, "keep autotune: trial 7's gain is within the noise"),
    ],
    ids=["one-round-below", "two-rounds-below"],
)
def test_ten_rounds_allow_one_round_at_or_below_autotune(below, beats, words):
    autotune = _rounds("autotune", [1000.0] * 10)
    rates = [950.0] * below + [1150.0] * (9 - below) + [1200.0]
    verdict, sentence = beats_autotune([_rounds("trial 7", rates), autotune])
    assert verdict is beats and sentence.startswith(words)
    five = [
        _rounds("trial 7", [950.0, 1150.0, 1150.0, 1200.0, 1150.0]),
        _rounds("autotune", [1000.0] * 5),
    ]
    assert beats_autotune(five)[0] is False  # five rounds: every one must be above 1


def test_an_inconclusive_confirmation_is_measured_again_in_twice_the_rounds():
    """The first confirmation saw trial 7 at 1.15x but one round below autotune: it and
    autotune are measured again (the fake workload: 1.2x, every round) in 10 rounds."""
    from tuners._confirm import Remeasure, confirm_longer

    fast = PipelineConfig(batch_size=100, map_parallelism=2)
    w = FakeWorkload(lambda c: 120_000.0 if c == fast else 100_000.0, wobble=0.0)
    how = Remeasure(
        target=Target.of(w),
        step=w.step,
        plan=WindowPlan(warmup_batches=1, windows=5, window_batches=2),
        windows=5,
        cpu_count=2,
        clocks={"clock": w.clock, "cpu_clock": lambda: 0.0},
    )
    first = [
        dataclasses.replace(
            _rounds("trial 7", [950.0, 1150.0, 1150.0, 1200.0, 1150.0]), config=fast
        ),
        dataclasses.replace(
            _rounds("autotune", [1000.0] * 5), config=PipelineConfig(batch_size=100)
        ),
        _rounds("trial 3", [900.0] * 5),
    ]
    notes: list[str] = []
    again = confirm_longer(how, first, progress=None, notes=notes)
    assert [c.name for c in again] == ["trial 7", "autotune"]
    assert len(again[0].windows) == 10 and again[0].ratio == pytest.approx(1.2)
    assert beats_autotune(again)[0] is True
    assert notes == [
        "confirmation: trial 7 measured 1.15x autotune paired, rounds 0.95x-1.20x, which cannot "
        "tell; it and autotune were measured again in 10 rounds, and those decide"
    ]
    decided = [_rounds("trial 7", [1100.0] * 5), _rounds("autotune", [1000.0] * 5)]
    assert confirm_longer(how, decided, progress=None, notes=notes) == decided  # no need


def test_a_win_below_the_least_gain_worth_a_change_keeps_autotune():
    """Faster in every round, but by 0.1% at the median: a scheduling difference."""
    from tuners._advice import MIN_GAIN

    tiny = [config_stats("trial 7", 1.001, 1.0012, 1.02), AUTOTUNE_STATS]
    verdict, sentence = beats_autotune(tiny)
    assert MIN_GAIN == 1.01 and verdict is False
    assert sentence == (
        "keep autotune: trial 7 measured faster in every round, but only 1.00x autotune paired, "
        "rounds 1.00x-1.02x: under the 1% gain worth changing the config for"
    )
    assert beats_autotune([config_stats("trial 7", 1.03, 1.01, 1.05), AUTOTUNE_STATS])[0]
