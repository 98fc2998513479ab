"""`tfinput._src.measurement.compare`: configs interleaved window by window (`interleave`, in
`tfinput._src.measurement.windows`), and the statistics of their windows (`summarize`,
`ConfigStats`, in `tfinput._src.measurement.compare`)."""

from __future__ import annotations

import numpy as np
import pytest

from tfinput._src.measurement.compare import stall_fraction, summarize
from tfinput._src.measurement.windows import Window, interleave
from tfinput.config import PipelineConfig
from tfinput.errors import ConfigError


def _window(*, rate=100.0, wait=0.25, seconds=1.0, r=0, name="", cpu=0.5, rss=0):
    return Window(
        name=name,
        round=r,
        batches=1,
        examples=int(rate * seconds),
        seconds=seconds,
        cpu_seconds=cpu,
        batch_seconds=(seconds,),
        wait_seconds=wait,
        peak_rss_bytes=rss,
    )


def test_summarize_spread_and_paired_ratios():
    def win(name, r, rate):
        return Window(
            name=name,
            round=r,
            batches=1,
            examples=int(rate),
            seconds=1.0,
            cpu_seconds=0.5,
            batch_seconds=(1.0,),
            wait_seconds=0.25,
        )

    windows = {
        "base": [win("base", 0, 100), win("base", 1, 200), win("base", 2, 100)],
        "new": [win("new", 0, 150), win("new", 1, 200), win("new", 2, 300)],
    }
    stats = {s.name: s for s in summarize(windows, baseline="base", cpu_count=2, bound=400)}
    new = stats["new"]
    assert (new.median, new.minimum, new.maximum) == (200, 150, 300)
    assert new.cv == pytest.approx(np.std([150, 200, 300], ddof=1) / np.mean([150, 200, 300]))
    assert (new.ratio, new.ratio_min, new.ratio_max) == (1.5, 1.0, 3.0)  # per round
    assert new.roofline_fraction == 0.5 and new.stall == 0.25 and new.utilisation == 0.25
    with pytest.raises(ConfigError, match="baseline 'other'"):
        summarize(windows, baseline="other")


def test_summarize_keeps_stall_when_every_window_knows_it():
    def window(wait):
        return Window(
            batches=1, examples=1, seconds=1.0, cpu_seconds=1.0, batch_seconds=(1.0,),
            wait_seconds=wait,
        )  # fmt: skip

    known, unknown = summarize({"k": [window(0.25), window(0.75)], "u": [window(None)]})
    assert known.stall == pytest.approx(0.5) and unknown.stall is None


def test_summarize_without_baseline_or_bound_has_no_ratios():
    (s,) = summarize({"a": [_window(rate=100.0, rss=2**21), _window(rate=300.0, r=1)]})
    assert (s.ratio, s.ratio_min, s.ratio_max, s.roofline_fraction) == (None,) * 4
    assert s.median == 200.0 and s.config is None and s.peak_rss_mb == 2.0
    assert s.cores_busy == 0.5 and s.utilisation == 0.5  # cpu_count defaults to 1


def test_summarize_records_the_configs_and_skips_rounds_the_baseline_lacks():
    config = PipelineConfig(batch_size=8)
    windows = {
        "base": [_window(rate=100.0, r=0)],
        "new": [_window(rate=200.0, r=0), _window(rate=400.0, r=1)],
    }
    base, new = summarize(windows, configs={"new": config}, baseline="base")
    assert base.config is None and new.config is config
    assert (base.ratio, new.ratio, new.ratio_max) == (1.0, 2.0, 2.0)  # round 1 has no pair


def test_interleave_takes_turns_and_names_every_window():
    order: list[str] = []

    def run(name):
        def one():
            order.append(name)
            return _window(name="ignored", r=99)

        return one

    seen: list[tuple[int, int, str, int]] = []
    out = interleave(
        {"a": run("a"), "b": run("b")},
        3,
        lambda done, total, w: seen.append((done, total, w.name, w.round)),
    )
    assert order == ["a", "b"] * 3
    assert [(w.name, w.round) for w in out["b"]] == [("b", 0), ("b", 1), ("b", 2)]
    assert seen[0] == (1, 6, "a", 0) and seen[-1] == (6, 6, "b", 2)
    assert interleave({"a": run("a")}, 2, None)["a"][1].round == 1


def test_stall_fraction():
    assert stall_fraction([_window(wait=0.5, seconds=1.0), _window(wait=0.0, seconds=3.0)]) == 0.125
    assert stall_fraction([_window(wait=0.5), _window(wait=None)]) is None
    assert stall_fraction([_window(wait=0.0, seconds=0.0)]) == 0.0


def test_config_stats_to_dict_rounds_and_nests():
    (s,) = summarize(
        {"a": [_window(rate=123.456, wait=1 / 3, r=0)]},
        configs={"a": PipelineConfig(batch_size=4)},
        baseline="a",
        bound=1000.0,
    )
    d = s.to_dict()
    assert d["name"] == "a" and d["config"] == PipelineConfig(batch_size=4).to_dict()
    assert d["examples_per_s"] == {"median": 123.0, "min": 123.0, "max": 123.0, "cv": 0.0}
    assert d["latency_ms"] == {"p50": 1000.0, "p99": 1000.0}
    assert d["stall_fraction"] == 0.3333 and d["cpu"] == {"cores_busy": 0.5, "utilisation": 0.5}
    assert d["vs_baseline"] == {"ratio": 1.0, "min": 1.0, "max": 1.0}
    assert d["roofline_fraction"] == 0.123 and len(d["windows"]) == 1
