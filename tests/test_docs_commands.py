"""Every command shown in README.md and docs/*.md is executed here, so the docs cannot
drift from the CLI.

Which blocks hold commands:

- fenced blocks labelled ``sh``, ``bash``, ``shell`` or ``console`` (in ``console``
  blocks only the ``$ `` lines are commands, the rest is their output);
- unlabelled fenced blocks in which some line starts with a command word
  (`COMMAND_WORDS`: ``tfinput``, ``./dev``, ``python``, ``pip``, ``git``, ``cd``).
  Unlabelled blocks without one (directory trees, sample output) are text.

A command is one line, ``\\`` continuations joined, a trailing ``# comment`` dropped.
Each one must be in exactly one of these categories, or
`test_every_doc_command_is_run_or_registered` fails naming the file, line and command:

(a) a ``tfinput`` line, run as written;
(b) a ``tfinput`` line in `MIRRORED`, keyed by (page, command as written): run in the
    mirrored form given there (fewer rows, trials or windows), for the reason given;
(c) a ``tfinput`` server line in `SERVERS` (it serves until SIGTERM): started in its own
    process in the mirrored form given there, checked to print its address and keep
    serving, then stopped (`test_the_servers_start`);
(d) a line in `NOT_RUN`, only where running it in a test is impossible (``./dev demo`` and
    ``./dev test``: the setup they do is what tests/tfinput/applications/test_doctor.py checks against
    ``./dev`` and CI);
(e) a ``tfinput`` line in `RUN_ELSEWHERE`: a test elsewhere runs it through the CLI with
    the same flags and checks what it wrote (the test is named there, and must exist):
    where this module would start an expensive runtime a second time (Ray).

Pages whose code blocks another test runs in full are in `PAGES_RUN_ELSEWHERE`
(docs/resume.md, docs/serving.md: their sh lines need the Python blocks before them).

Each page's commands run in order in one empty working directory (`PAGE_SETUP` first
writes the inputs the page assumes its reader has, such as ``data/train-*.parquet``), in a
namespace of its own, each through ``tfinput.cli.main``; the pages run in turn in one
Python process; each must exit
with 0, or with the code in `EXIT_CODES`. A new page, or a new command on a page, runs
without any change here when it runs as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._once import run_once, run_programs, selected
from tests.helpers import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"sh", "bash", "shell", "console"}
COMMAND_WORDS = ("tfinput", "./dev", "python", "pip", "git", "cd")
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M
)
COMMENT = re.compile(r"\s+#(\s.*)?$")

# Pages whose every code block (Python and sh, in order, in one namespace) another test
# runs; their sh lines need the Python blocks before them (a model saved, ...).
PAGES_RUN_ELSEWHERE = {
    "docs/resume.md": "tests/test_docs_resume.py",
    "docs/serving.md": "tests/test_docs_serving.py",
}

# Small data: the same commands on a few hundred rows instead of 400k or 1M, few windows.
_SMALL_BENCH = "--batch-size 50 --windows 2 --window-batches 2 --warmup-batches 1"
_SMALL_TUNE = (
    "--n-trials 2 --batch-size 50 --windows 1 --window-batches 2 --warmup-batches 1 "
    "--confirm-top 1 --confirm-windows 1 --no-breakdown --no-format-advice"
)
_ROOFLINE = "--roofline-windows 1"

# (page, command as written) -> (the command run instead, why).
MIRRORED: dict[tuple[str, str], tuple[str, str]] = {
    (
        "README.md",
        "tfinput tune data/train-*.parquet --schema schema.json --step ranking --out runs/tune",
    ): (
        "tfinput tune data/train-*.parquet --schema schema.json --step ranking --out runs/tune "
        + _SMALL_TUNE,
        "the default 30 trials with confirmation, gain by knob and format advice take "
        "minutes: 2 trials, short windows",
    ),
    (
        "README.md",
        "tfinput bench data/train-*.parquet --schema schema.json --config autotune "
        "--config runs/tune/best_config.json",
    ): (
        "tfinput bench data/train-*.parquet --schema schema.json --config autotune "
        "--config runs/tune/best_config.json " + _SMALL_BENCH,
        "short windows on small batches",
    ),
    (
        "README.md",
        "tfinput profile --pipeline mymodule:make_pipeline --config runs/tune/best_config.json",
    ): (
        "tfinput profile --pipeline mymodule:make_pipeline --config runs/tune/best_config.json "
        "--steps 2 --warmup 1",
        "2 profiled steps instead of 10 (after 1 warm-up step instead of 5)",
    ),
    ("docs/bench.md", "tfinput datagen data/criteo --rows 400k --files 8"): (
        "tfinput datagen data/criteo --rows 2k --files 2",
        "2k rows instead of 400k",
    ),
    ("docs/bench.md", "tfinput bench data/criteo --roofline"): (
        f"tfinput bench data/criteo --roofline {_SMALL_BENCH} {_ROOFLINE}",
        "short windows on small batches",
    ),
    (
        "docs/bench.md",
        "tfinput bench data/criteo --config autotune --config best=tuned.json "
        "--baseline autotune --json",
    ): (
        "tfinput bench data/criteo --config autotune --config best=tuned.json "
        f"--baseline autotune --json {_SMALL_BENCH}",
        "short windows on small batches",
    ),
    ("docs/columnar.md", "tfinput bench data/criteo-col --config heuristic --config autotune"): (
        f"tfinput bench data/criteo-col --config heuristic --config autotune {_SMALL_BENCH}",
        "short windows on small batches",
    ),
    ("docs/data.md", "tfinput datagen data/criteo-tfr --rows 1M --files 8"): (
        "tfinput datagen data/criteo-tfr --rows 2k --files 8",
        "2k rows instead of 1M",
    ),
    ("docs/data.md", "tfinput datagen data/criteo-pq --rows 1M --files 8 --format parquet"): (
        "tfinput datagen data/criteo-pq --rows 2k --files 8 --format parquet",
        "2k rows instead of 1M",
    ),
}

# (page, command as written) -> (the test that runs it with the same flags, why not here).
RUN_ELSEWHERE: dict[tuple[str, str], tuple[str, str]] = {
    (
        "docs/scaling.md",
        "tfinput convert logs/day-*.tsv --preset criteo --to columnar --out /shared/day-col "
        "--engine ray --ray-address auto",
    ): (
        "tests/tfinput/applications/convert/test_ray_engine.py::test_the_documented_ray_command",
        "that module starts one local Ray instance for all its tests; here a second would "
        "start (a minute of CPU on 2 cores). It runs these flags on raw Criteo TSV days "
        "(--ray-address auto joins its instance) and compares with the one-process output",
    ),
}

# Servers that run until SIGTERM: (page, command as written) -> (the command started
# instead, why). Each is started in its own process in the order of the page (``{port}``:
# a free local port, ``{tmp}``: the test's directory), must print its address and keep
# serving, and is then stopped with SIGTERM.
SERVERS: dict[tuple[str, str], tuple[str, str]] = {
    ("docs/scaling.md", "tfinput serve dispatcher --port 5050 --work-dir /var/tfdata/dispatcher"): (
        "tfinput serve dispatcher --port {port} --work-dir {tmp}/dispatcher",
        "a free port and a writable work directory on this machine",
    ),
    (
        "docs/scaling.md",
        "tfinput serve worker --dispatcher dispatcher-host:5050 --port 5051 "
        "--worker-address worker-1",
    ): (
        "tfinput serve worker --dispatcher localhost:{port} --port 0 --worker-address localhost",
        "the dispatcher started just before, on this machine (a free port; this machine's name)",
    ),
}
# (page, command) -> why it cannot run in a test. Keep this short.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "./dev demo"): (
        "creates .venv and installs the project the first time, then runs `tfinput demo` "
        "for about three minutes on 200k rows; the setup is what tests/tfinput/applications/test_doctor.py "
        "checks against ./dev and CI, and the demo's pieces (datagen, tune, bench) run here"
    ),
    ("README.md", "./dev test"): "the test suite itself (this test is part of it)",
}

# (page, command as written) -> the exit code the page documents, where it is not 0.
EXIT_CODES: dict[tuple[str, str], int] = {}


# ------------------------------------------------------------------ page setup
# The inputs each page assumes its reader already has, written in the page's working
# directory before its commands (Python run in the same child process, `cli` imported).
_SMALL_DATA = """
def small_data(out, fmt="tfrecord", rows=400, prefix=None, files=2):
    assert cli.main(["datagen", out, "--preset", "small", "--rows", str(rows),
                     "--files", str(files), "--format", fmt]) == 0
    if prefix:
        for f in sorted(Path(out).glob("part-*")):
            f.rename(f.with_name(prefix + f.name[len("part"):]))
"""

PAGE_SETUP: dict[str, str] = {
    "README.md": """
small_data("data", "parquet", prefix="train")
Path("data/schema.json").unlink()   # the page infers its own
Path("mymodule.py").write_text(
    "import tfinput\\n"
    "def make_pipeline(config):\\n"
    "    schema = tfinput.Schema.from_json('schema.json')\\n"
    "    return tfinput.parquet('data/train-*.parquet', schema)\\n"
)
""",
    "docs/bench.md": """
import tfinput
tfinput.PipelineConfig(batch_size=50, map_parallelism=2, prefetch=2).to_json("tuned.json")
""",
    "docs/columnar.md": """
small_data("data/criteo", "parquet")
""",
    "docs/data.md": """
import csv, gzip, shutil
sample = Path(SHARED_DATA)
lines = (sample / "criteo_sample.txt").read_text().splitlines()[1:]
with gzip.open("day_0.tsv.gz", "wt") as f:   # the raw Criteo layout: TSV, no header
    f.writelines(line.replace(",", "\\t") + "\\n" for line in lines)
shutil.copy(sample / "movielens_sample.txt", "ratings.csv")
with open("clicks.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["user", "item", "price", "tags", "clicked"])
    for i in range(200):
        w.writerow([i % 17, i % 29, i * 0.5, "|".join(["a", "b", "c"][: i % 4]), i % 2])
with open("dirty.csv", "w", newline="") as f:
    f.write("user,price,clicked\\n")
    for i in range(100):
        f.write(f"{i},{i * 0.5},{i % 2}\\n")
    f.write("7,not-a-number,1\\n1,2\\n")         # a value that does not parse, a short row
small_data("data/pq", "parquet")
small_data("data/tfr", "tfrecord")
shutil.copy("data/tfr/schema.json", "schema.json")
""",
    "docs/sparsecore.md": """
import shutil
small_data("data/train", "tfrecord", rows=4096)   # one global batch of 8 x 512
shutil.move("data/train/schema.json", "schema.json")
""",
    "docs/tuning.md": """
import shutil
small_data("data", "tfrecord", rows=2048, prefix="train")
shutil.move("data/schema.json", "schema.json")
""",
}
# Pages whose setup reads the project's real sample data (tests/helpers.SHARED_DATA).
NEEDS_SHARED_DATA = {"docs/data.md"}


# ------------------------------------------------------------------ discovery
@dataclass(frozen=True)
class Command:
    page: str  # relative to the repository root
    line: int  # 1-based line of the command's first line
    text: str  # as written: continuations joined, trailing comment dropped

    def where(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands(path: Path, page: str | None = None) -> list[Command]:
    """The command lines of the page's shell blocks (see the module docstring); ``page``
    names it (default: its path in the repository)."""
    text = path.read_text()
    page = page or path.relative_to(ROOT).as_posix()
    found = []
    for m in FENCE.finditer(text):
        lang, indent = m.group("lang").lower(), len(m.group("indent"))
        first = text.count("\n", 0, m.start("body")) + 1
        lines = [
            line[indent:] if line[:indent].isspace() else line
            for line in m.group("body").splitlines()
        ]
        unlabelled_commands = not lang and any(_is_command(line) for line in lines)
        if lang not in SHELL_LANGS and not unlabelled_commands:
            continue
        i = 0
        while i < len(lines):
            start, line = i, lines[i].strip()
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = COMMENT.sub("", line).strip()
            if line and not line.startswith("#"):
                found.append(Command(page, first + start, line))
    return found


def _is_command(line: str) -> bool:
    words = line.strip().split()
    return bool(words) and words[0] in COMMAND_WORDS


def all_commands() -> list[Command]:
    return [c for path in pages() for c in commands(path)]


def plan(command: Command) -> list[str] | None:
    """``tfinput`` argv (without ``tfinput``) the command runs as in the page's script;
    None for `NOT_RUN` lines and `SERVERS` (started by `test_the_servers_start`)."""
    key = (command.page, command.text)
    if key in NOT_RUN or key in RUN_ELSEWHERE:
        return None
    text = (MIRRORED.get(key) or SERVERS.get(key) or (command.text,))[0]
    argv = shlex.split(text)
    if not argv or argv[0] != "tfinput":
        raise AssertionError(
            f"{command.where()}\n  is neither a tfinput command nor registered in NOT_RUN "
            "(tests/test_docs_commands.py): make it a tfinput command or say why a test "
            "cannot run it"
        )
    return None if key in SERVERS else argv[1:]


def _pages_with_commands() -> list[str]:
    """Pages with commands their own script runs (README first)."""
    names = {
        c.page
        for c in all_commands()
        if c.page not in PAGES_RUN_ELSEWHERE
        and (c.page, c.text) not in {**NOT_RUN, **SERVERS, **RUN_ELSEWHERE}
    }
    return sorted(names, key=lambda p: (p != "README.md", p))


# ------------------------------------------------------------------ tests
def test_every_doc_command_is_run_or_registered():
    """Each command parses with the real CLI parser, as written and as mirrored; a
    command that is neither a tfinput line nor in NOT_RUN fails here."""
    from tfinput._src.applications.cli.registry import build_parser

    problems = []
    found = all_commands()
    assert {c.page for c in found} >= {"README.md", "docs/bench.md", "docs/data.md"}
    for command in found:
        key = (command.page, command.text)
        try:
            plan(command)
        except AssertionError as e:
            problems.append(str(e))
            continue
        if key in NOT_RUN:
            continue
        tried = [shlex.split(command.text)[1:]]
        if key in MIRRORED or key in SERVERS:
            run_as = (MIRRORED.get(key) or SERVERS[key])[0]
            tried.append(shlex.split(run_as.format(port=5050, tmp="/tmp"))[1:])
        for args in tried:
            try:
                build_parser().parse_args(args)
            except SystemExit:
                problems.append(f"{command.where()}\n  does not parse: tfinput {shlex.join(args)}")
    assert not problems, "\n".join(problems)


PAGE = """# A page

```sh
tfinput datagen data --rows 2k \\
    --files 2              # a comment
# a comment line
```

```console
$ tfinput check data
data/part-00000-of-00002.tfrecord: 1,000 records  ok
```

```
data/
  schema.json
```

1. A list item:

   ```
   tfinput bench data --config autotune
   ```

```python
import tfinput  # tfinput datagen in Python is not a command
```

```bash
pip install something-new
```
"""


def test_discovery_reads_shell_and_unlabelled_command_blocks(tmp_path):
    """The discovery rules of the module docstring, on a page written here; an
    unregistered non-tfinput line fails with its page, line and text."""
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    found = commands(path, "docs/new.md")
    assert [(c.line, c.text) for c in found] == [
        (4, "tfinput datagen data --rows 2k --files 2"),
        (10, "tfinput check data"),
        (22, "tfinput bench data --config autotune"),
        (30, "pip install something-new"),
    ]
    assert plan(found[0]) == ["datagen", "data", "--rows", "2k", "--files", "2"]
    with pytest.raises(AssertionError, match=r"docs/new.md:30: pip install something-new"):
        plan(found[3])


def test_the_tables_name_real_doc_lines():
    """MIRRORED, NOT_RUN, EXIT_CODES and PAGE_SETUP name commands and pages that exist,
    so the tables cannot outlive the docs; pages run elsewhere have their runner."""
    keys = {(c.page, c.text) for c in all_commands()}
    for table in (MIRRORED, SERVERS, NOT_RUN, EXIT_CODES, RUN_ELSEWHERE):
        stale = sorted(set(table) - keys)
        assert not stale, f"no such command in the docs (update the table): {stale}"
    assert not set(MIRRORED) & set(NOT_RUN) and not set(SERVERS) & (set(MIRRORED) | set(NOT_RUN))
    assert not set(RUN_ELSEWHERE) & (set(MIRRORED) | set(NOT_RUN) | set(SERVERS))
    for test, _ in RUN_ELSEWHERE.values():
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"no test {test}"
    for page in PAGE_SETUP:
        assert (ROOT / page).is_file(), page
    for page, runner in PAGES_RUN_ELSEWHERE.items():
        assert (ROOT / page).is_file(), page
        assert page in (ROOT / runner).read_text(), f"{runner} runs {page}"


def script(page: str) -> str:
    """The page's program: its setup, then each command through the CLI."""
    parts = [
        "import os, sys, shutil",
        "from pathlib import Path",
        "from tfinput import cli",
        f"SHARED_DATA = {str(SHARED_DATA)!r}",
        _SMALL_DATA,
        PAGE_SETUP.get(page, ""),
        "print('SETUP OK', flush=True)",
        "def run(argv, expected, where):",
        "    print('RUN', where, flush=True)",
        "    try:",
        "        code = cli.main(argv)",
        "    except SystemExit as e:",
        "        code = e.code",
        "    assert code == expected, f'{where}: exit code {code}, expected {expected}'",
    ]
    for command in commands(ROOT / page):
        argv = plan(command)
        if argv is not None:
            expected = EXIT_CODES.get((command.page, command.text), 0)
            parts.append(f"run({argv!r}, {expected}, {command.where()!r})")
    parts.append("print('DOC OK', flush=True)")
    return "\n".join(parts)


def _run_pages(pages: list[str], directory: Path) -> dict[str, list[str]]:
    """The pages' programs in turn in one child (one TensorFlow import for all), each in
    its own empty working directory: page -> [status, stdout, stderr, its directory]."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_BACKEND": "tensorflow",
    }
    return run_programs({page: script(page) for page in pages}, directory, env, timeout=1800)


def _needs_page(item: pytest.Item) -> str | None:
    spec = getattr(item, "callspec", None)
    if item.originalname != "test_the_page_commands_run" or spec is None:
        return None
    page = spec.params["page"]
    return None if page in NEEDS_SHARED_DATA and not SHARED_DATA.is_dir() else page


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory) -> dict[str, list[str]]:
    """page -> [status, stdout, stderr, its directory], for the pages the session
    selected: run once, in one child."""
    pages = selected(request, _needs_page)
    return run_once(tmp_path_factory, "doc-pages", lambda d: _run_pages(pages, d))


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with_commands())
def test_the_page_commands_run(page, page_runs):
    if page in NEEDS_SHARED_DATA and not SHARED_DATA.is_dir():
        pytest.skip(f"{page}'s inputs come from the real samples in {SHARED_DATA} (absent)")
    status, out, err, _ = page_runs[page]
    ran = [line[4:] for line in out.splitlines() if line.startswith("RUN ")]
    assert status == "ok" and out.rstrip().endswith("DOC OK"), (
        f"failed at {ran[-1] if ran else 'the setup'}\n" + out[-3000:] + err[-3000:]
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted({page for page, _ in SERVERS}))
def test_the_servers_start(page, tmp_path):
    """The page's servers start in order (the dispatcher before its workers), each prints
    its address and keeps serving, and each stops on SIGTERM."""
    import select
    import signal
    import time

    started = [
        (c, shlex.split(SERVERS[(c.page, c.text)][0])[1:])
        for c in commands(ROOT / page)
        if (c.page, c.text) in SERVERS
    ]
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",  # the address line arrives through a pipe
    }
    procs = []
    try:
        for command, argv in started:
            argv = [a.format(port=port, tmp=tmp_path) for a in argv]
            proc = subprocess.Popen(
                [sys.executable, "-m", "tfinput.cli", *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=tmp_path,
                env=env,
            )
            procs.append(proc)
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            first = proc.stdout.readline() if ready else ""  # its address, once it serves
            time.sleep(1)
            assert first.strip() and proc.poll() is None, (
                f"{command.where()}: no address printed, or exited ({proc.poll()}) "
                f"before serving\n{first}" + (proc.stdout.read()[-3000:] if proc.poll() else "")
            )
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
