"""`tests/ends.toml` applied: which end of the supported matrix runs which test, which
tests are slow, and whose garbage is frozen (the file's header says what each table
means). A pytest plugin, loaded by tests/conftest.py; ``--quick`` and ``--record-slow``
are its options."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ENDS = ("newest", "oldest")
#: The end this run is (``./dev test --oldest`` / ``--newest`` set it); "" runs everything.
END = os.environ.get("TFINPUT_TEST_END", "")
FILE = Path(__file__).with_name("ends.toml")


@dataclass(frozen=True)
class Module:
    end: str
    reason: str
    end_to_end: bool = False


@dataclass(frozen=True)
class OneTest:
    end: str
    reason: str


@dataclass(frozen=True)
class Split:
    oldest: frozenset[str]
    reason: str


@dataclass(frozen=True)
class Plan:
    modules: dict[str, Module]
    tests: dict[str, OneTest]
    split: dict[str, Split]
    slow: dict[str, str]
    freeze_after: tuple[str, ...]
    freeze_before: tuple[str, ...]

    def on_the_other_end(self, nodeid: str, end: str = END) -> bool:
        """Whether ``end`` leaves the test ``nodeid`` to the other end."""
        if end not in ENDS:
            return False
        function, _, case = nodeid.partition("[")
        module = self.modules.get(function.split("::", 1)[0])
        if module is not None:
            return module.end != end
        split = self.split.get(function)
        if split is not None and (case.rstrip("]") in split.oldest) != (end == "oldest"):
            return True
        one = self.tests.get(nodeid) or self.tests.get(function)
        return one is not None and one.end != end

    def end_to_end(self, nodeid: str) -> bool:
        module = self.modules.get(nodeid.split("::", 1)[0])
        return module is not None and module.end_to_end

    def check_collected(self, nodeids: list[str]) -> None:
        """Every split case is a real case of its test and leaves the newest end some (a
        renamed parameter would otherwise leave an end none); every single test listed
        in a collected module exists. Raises ValueError naming the stale entry."""
        seen: dict[str, set[str]] = {}
        ids, modules = set(), set()
        for nodeid in nodeids:
            function, _, case = nodeid.partition("[")
            ids.update((nodeid, function))
            modules.add(function.split("::", 1)[0])
            if function in self.split:
                seen.setdefault(function, set()).add(case.rstrip("]"))
        for function, cases in seen.items():
            if stale := self.split[function].oldest - cases:
                raise ValueError(
                    f"tests/ends.toml [split]: {function} has no case "
                    f"{', '.join(sorted(stale))}; its cases are {', '.join(sorted(cases))}"
                )
            if not cases - self.split[function].oldest:
                raise ValueError(
                    f"tests/ends.toml [split]: {function} leaves the newest end no case"
                )
        if stale_tests := {t for t in self.tests if t.split("::")[0] in modules} - ids:
            raise ValueError(
                f"tests/ends.toml [test]: no such test {', '.join(sorted(stale_tests))}"
            )


def load(path: Path = FILE) -> Plan:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    freeze = data.get("freeze_garbage", {})
    return Plan(
        modules={k: Module(**v) for k, v in data.get("module", {}).items()},
        tests={k: OneTest(**v) for k, v in data.get("test", {}).items()},
        split={
            k: Split(frozenset(v["oldest"]), v["reason"]) for k, v in data.get("split", {}).items()
        },
        slow=dict(data.get("slow", {})),
        freeze_after=tuple(freeze.get("after", ())),
        freeze_before=tuple(freeze.get("before", ())),
    )


PLAN = load()

#: Tests that took 3 s or more in the last recorded full run: besides the end-to-end
#: modules and the tests marked slow, what ``--quick`` leaves out. Regenerate with
#: ``./dev test --newest --record-slow``.
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
SLOW_SECONDS = 3.0


def _slow_list() -> frozenset[str]:
    if not SLOW_LIST.exists():
        return frozenset()
    lines = (line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text().splitlines())
    return frozenset(line for line in lines if line)


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
        if item.nodeid.split("[", 1)[0] in PLAN.slow:
            item.add_marker(pytest.mark.slow)
        long = quick and (
            PLAN.end_to_end(item.nodeid)
            or item.nodeid in slow
            or item.get_closest_marker("slow") is not None
        )
        (dropped if PLAN.on_the_other_end(item.nodeid) or long else keep).append(item)
    if not any("::" in arg for arg in config.args):  # not when tests are picked by id
        try:
            PLAN.check_collected([item.nodeid for item in items])
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
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
        f"# Tests that took {SLOW_SECONDS:g} s or more (set-up and call) in the last full run\n"
        "# recorded; `./dev test --quick` leaves them out.\n"
        "# Written by `./dev test --newest --record-slow`; edit by hand only to add.\n"
        + "".join(f"{n}\n" for n in slow)
    )


def pytest_report_header(config: pytest.Config) -> str:
    if END not in ENDS:
        return "tfinput: no end named (TFINPUT_TEST_END); runs every test"
    other = "newest" if END == "oldest" else "oldest"
    left = ", ".join(m for m, module in sorted(PLAN.modules.items()) if module.end == other)
    tests = sum(t.end == other for t in PLAN.tests.values())
    return (
        f"tfinput: {END} end; left to the {other} end (tests/ends.toml): {left}; and "
        f"{tests} single tests, and the {other} end's cases of {len(PLAN.split)} "
        "parametrised tests"
    )


@pytest.fixture(autouse=True)
def _freeze_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    """tests/ends.toml [freeze_garbage]: the garbage earlier tests left frozen before the
    tests under ``before``; this test's garbage frozen when it ends for those under
    ``after``, and when it left more JAX arrays alive than there were before it."""
    import gc

    if request.node.nodeid.startswith(PLAN.freeze_before):
        gc.freeze()
    jax_arrays = _live_jax_arrays()
    yield
    if request.node.nodeid.startswith(PLAN.freeze_after) or _live_jax_arrays() > jax_arrays:
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
