"""`tfinput._src.applications.cli.console`: the rich console the commands print with (stable width when
piped) and the progress bar (silent when stderr is not a terminal)."""

from __future__ import annotations

import pytest

from tfinput._src.applications.cli.console import PIPED_WIDTH, console, progress

ROW = " ".join(f"w{i:03d}" for i in range(30))  # 149 characters


@pytest.mark.parametrize("stderr", [False, True], ids=["stdout", "stderr"])
def test_console_prints_to_its_stream(capsys, stderr):
    console(stderr=stderr).print("result: [bold]1,000[/] records")
    out, err = capsys.readouterr()
    assert (err if stderr else out) == "result: 1,000 records\n"
    assert (out if stderr else err) == ""


def test_piped_output_is_wide_and_plain(capsys):
    out = console()
    assert out.width == PIPED_WIDTH == 160
    out.print(ROW)  # fits in 160 columns: one line, no colour codes
    assert capsys.readouterr().out == ROW + "\n"
    out.print(ROW + " " + ROW)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line) <= PIPED_WIDTH for line in lines)


def test_piped_width_can_be_set(capsys):
    out = console(piped_width=80)
    assert out.width == 80
    out.print(ROW)
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 80


def test_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    with progress() as bar:
        task = bar.add_task("reading", total=3)
        for _ in range(3):
            bar.advance(task)
    assert bar.tasks[0].completed == 3 and bar.tasks[0].finished
    assert bar.disable
    assert capsys.readouterr() == ("", "")


def test_progress_lines_are_silent_for_a_short_step_then_periodic(capsys):
    from tfinput._src.applications.cli.console import ProgressLines

    now = [0.0]
    short = ProgressLines("check", "files", every=10, clock=lambda: now[0])
    for done, t in [(0, 0.0), (5, 4.0), (10, 9.0)]:
        now[0] = t
        short(done, 10)
    assert capsys.readouterr().err == ""
    long = ProgressLines("check", "files", every=10, clock=lambda: now[0])
    for done, t in [(0, 100.0), (1, 105.0), (2_000, 110.0), (3_000, 115.0), (6_000, 121.0)]:
        now[0] = t
        long(done, 10_000)
    for done, t in [(10_000, 124.0), (10_000, 130.0)]:
        now[0] = t
        long(done, 10_000)
    assert capsys.readouterr().err.splitlines() == [
        "check: 2,000 of 10,000 files (10 s)",
        "check: 6,000 of 10,000 files (21 s)",
        "check: 10,000 of 10,000 files (24 s)",
    ]
