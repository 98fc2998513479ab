"""`tfinput.cli.console`: the rich console the commands print with (stable width when
piped) and the progress bar (silent when stderr is not a terminal)."""

from __future__ import annotations

import pytest

from tfinput.cli.console import PIPED_WIDTH, console, progress

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
