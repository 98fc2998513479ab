"""`tuners._confirm`: after the search, the confirmation against autotune (one retry),
the winner, the verdicts' input wait and the advice sentences."""

from __future__ import annotations

import json

import optuna
import pytest

from tests.tuners.conftest import (
    FAST,
    FakeClock,
    FakeWorkload,
    config_stats,
    options,
    rate_by_parallelism,
)
from tfinput import steps
from tfinput._src.measurement import roofline
from tfinput._src.measurement.target import MeasureOptions, Target
from tfinput._src.measurement.windows import WindowPlan, measure_window
from tfinput.config import PipelineConfig
from tuners._confirm import Remeasure, confirmation_configs, pick_winner
from tuners._report import write_outputs
from tuners._space import SearchSpace
from tuners._study import tune
from tuners._winner_advice import advice_sentences, serial_sentence, winner_roofline

AUTO = PipelineConfig.autotune(batch_size=50)


def test_confirmation_configs_measure_autotune_current_and_distinct_candidates():
    current = PipelineConfig(batch_size=50, map_parallelism=2)
    other = PipelineConfig(batch_size=50, map_parallelism=3)
    candidates = [("trial 4", current), ("trial 5", other), ("trial 6", other)]
    configs = confirmation_configs(AUTO, current, candidates)
    assert configs == {"autotune": AUTO, "current": current, "trial 5": other}
    assert list(confirmation_configs(AUTO, None, [("trial 1", AUTO)])) == ["autotune"]


def test_pick_winner_is_the_best_confirmed_else_the_best_trial():
    best = PipelineConfig(batch_size=50, prefetch=3)
    confirmed = [config_stats("trial 2", 1.3, 1.1, 1.5, config=best)]
    assert pick_winner(confirmed, [("trial 9", AUTO)], AUTO) == ("trial 2", best)
    assert pick_winner([], [("trial 9", best)], AUTO) == ("trial 9", best)
    assert pick_winner([], [], AUTO) == ("autotune", AUTO)


def test_advice_sentences():
    base = PipelineConfig(batch_size=1024)
    assert advice_sentences(None, input_bound=True, best_config=base, base=base) == []
    (lr,) = advice_sentences(
        None, input_bound=True, best_config=base.replace(batch_size=4096), base=base
    )
    assert "from 1024 to 4096" in lr and "learning rate linearly (x4)" in lr
    serial = "one thread handles every record of winner: ..."
    assert advice_sentences(None, input_bound=True, best_config=base, base=base, serial=serial) == [
        serial
    ]


def _roofline(cores, serial_rate, *, elements=4096.0):
    stages = [
        roofline.Stage(name=n, description=n, examples_per_s=r, examples_per_cpu_s=r, cores_busy=1)
        for n, r in (("read", 1e6), ("parse", 2e5), ("full", 1e5))
    ]
    serial = roofline.SerialStage(
        config="winner",
        elements_per_batch=elements,
        batch_size=4096,
        examples_per_s=serial_rate,
        examples_per_cpu_s=serial_rate,
    )
    return roofline.roofline_from_stages(stages, cores=cores, files=8, serial=[serial])


def test_serial_sentence_only_when_the_serial_stage_is_the_bound():
    text = serial_sentence(_roofline(16, 2.5e5))  # 1.6M of parallel work, 250k serial
    assert text.startswith("one thread handles every record of winner: 4.00 us each caps it")
    assert "can reach about 216,216 examples/s here; its parallel stages alone 1,600,000" in text
    assert serial_sentence(_roofline(2, 2.5e5)) is None  # 200k of parallel work: cpu-bound
    assert serial_sentence(None) is None


def test_winner_roofline_finds_a_per_record_winner_serial_bound_on_many_cores(
    small_tfrecord, small_schema
):
    import tfinput

    how = Remeasure(
        target=Target.of(tfinput.tfrecord(small_tfrecord, small_schema)),
        step=None,
        plan=WindowPlan(),
        windows=1,
        cpu_count=64,  # parallel stages scaled to 64 cores; the serial stage is one thread
    )
    notes: list[str] = []
    records = PipelineConfig.autotune(batch_size=200, read_batch=0)
    roofline = winner_roofline(how, records, notes=notes)
    assert notes == [] and [s.config for s in roofline.serial] == ["winner"]
    text = serial_sentence(roofline)
    assert text is not None and text.startswith("one thread handles every record of winner")
    missing = Remeasure(target=None, step=None, plan=WindowPlan(), windows=1, cpu_count=2)
    assert winner_roofline(missing, records, notes=notes) is None
    assert len(notes) == 1 and notes[0].startswith("roofline not measured: ")


def test_remeasure_measures_as_bench_measure_with_the_confirmations_windows():
    clock = FakeClock()
    how = Remeasure(
        target=None,
        step=steps.input_only(),
        plan=WindowPlan(warmup_batches=2, windows=7, window_batches=3),
        windows=4,
        cpu_count=2,
        clocks={"clock": clock},
    )
    assert how.measurement() == MeasureOptions(
        warmup_batches=2,
        windows=4,  # the confirmation's, not the plan's
        window_batches=3,
        window_seconds=0.0,  # the plan's: no time target
        cpu_count=2,
        clock=clock,
    )


# ------------------------------------------------------------ inside tune()
def test_one_transient_error_in_the_confirmation_is_retried(tmp_path):
    failed = []

    def once_in_confirmation(batch):
        if work.confirming and not failed:
            failed.append(1)
            raise RuntimeError("transient: connection reset")

    work = FakeWorkload(rate_by_parallelism, fail=once_in_confirmation)
    result = work.tune(n_trials=6, lock_path=str(tmp_path / "lock"))
    assert failed and result.confirmed and result.confirmation_error is None
    assert any("confirmation attempt 1 of 2 failed" in w for w in result.warnings)
    assert result.best_config.map_parallelism != 1


def test_a_failed_confirmation_reports_the_search_result(tmp_path):
    def in_confirmation(batch):
        if work.confirming:
            raise RuntimeError("device lost in confirmation")

    work = FakeWorkload(rate_by_parallelism, fail=in_confirmation)
    result = work.tune(n_trials=6, lock_path=str(tmp_path / "lock"))
    assert result.confirmed == () and "device lost" in result.confirmation_error
    best = max(
        (t for t in result.study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE),
        key=lambda t: t.value,
    )
    assert result.best_config == PipelineConfig.from_dict(best.user_attrs["config"])
    paths = write_outputs(result, tmp_path / "out")
    data = json.loads(paths["result"].read_text())
    assert "device lost" in data["confirmation_error"] and data["ratio_vs_autotune"] is None
    assert PipelineConfig.from_json(paths["best_config"]) == result.best_config
    assert "not confirmed" in paths["report"].read_text()


class LoopOwningWorkload:
    """Input that costs ``input_s`` of fake time per batch and a step that costs
    ``device_s`` and owns the loop (as ``model.fit``): its windows hide the input wait."""

    def __init__(self, *, input_s, device_s):
        self.clock = FakeClock()
        self.input_s, self.device_s = input_s, device_s

    def __call__(self, config):
        def batches():
            while True:
                self.clock.t += self.input_s
                yield {"rows": config.batch_size}

        return batches()

    def run(self, batch):
        self.clock.t += self.device_s

    def owner(self, source, *, plan, batch_size, **kw):
        import dataclasses

        warmup_batches, windows, window_batches = (
            plan.warmup_batches,
            plan.windows,
            plan.window_batches,
        )

        it = iter(source)
        clocks = {"clock": self.clock, "cpu_clock": lambda: 0.0}
        measure_window(it, batches=warmup_batches, step=self.run, **clocks)
        return [
            dataclasses.replace(
                measure_window(
                    it, batches=window_batches, step=self.run, batch_size=batch_size, **clocks
                ),
                wait_seconds=None,
                round=i,
            )
            for i in range(windows)
        ]


def test_the_input_wait_of_a_loop_owning_step_comes_from_the_step_bound(tmp_path):
    work = LoopOwningWorkload(input_s=0.001, device_s=0.003)
    step = steps.Step(kind="function", name="fit-like", fn=work.run, run_windows=work.owner)
    result = tune(
        work,
        step=step,
        n_trials=2,
        base=PipelineConfig(batch_size=100, drop_remainder=True),
        space=SearchSpace(choices={"prefetch": (1, 2)}),
        options=options(
            cpu_count=2,
            clock=work.clock,
            cpu_clock=lambda: 0.0,
            lock_path=str(tmp_path / "lock"),
            **{**FAST, "confirm_windows": 2},  # two rounds: a spread to judge the wait by
        ),
    )
    assert result.confirmed[0].stall is None
    # fed: 100 rows / 4 ms = 25,000/s; the step alone: 100 rows / 3 ms = 33,333/s
    assert result.step_bound == pytest.approx(100 / 0.003)
    assert result.input_wait == pytest.approx(0.25)
    assert result.input_wait_source == "step bound" and result.input_bound is True
    data = result.to_dict()
    assert data["step_bound_examples_per_s"] == pytest.approx(33333.3)


def test_tune_reports_the_format_advice_unless_opted_out(tuned, tmp_path):
    pipeline, _, off = tuned  # FAST: advise_format=False, breakdown=False
    assert off.format_advice is None and off.to_dict()["format_advice"] is None
    fast = {k: v for k, v in FAST.items() if k != "advise_format"}
    assert fast["breakdown"] is False
    on = tune(
        pipeline,
        n_trials=2,
        base=PipelineConfig(batch_size=50),
        options=options(
            cpu_count=2, lock_path=str(tmp_path / "lock"), schema_path="schema.json", **fast
        ),
    )
    assert not any("roofline not measured" in w for w in on.warnings)
    if on.format_advice is None:  # parse was measured not to be the bound here
        assert not any("format advice not measured" in w for w in on.warnings)
    else:
        assert on.format_advice.parse_bound
        assert on.format_advice.sentence() in on.advice
        assert "--schema schema.json" in on.to_dict()["format_advice"]["command"]
