"""`tfinput._src.core.options`: `check_counts`, the count settings of the options
objects; `load_object` (public as `tfinput._src.core.options.load_object`): ``MODULE:ATTRIBUTE``
objects named on the command line (``--pipeline``, ``--model``, ``--step-fn``) and the
errors that name what is wrong."""

from __future__ import annotations

import sys

import pytest

from tfinput._src.core.options import check_counts, load_object
from tfinput.errors import ConfigError


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_counts_below_one_or_not_ints_are_refused_with_their_name(bad):
    with pytest.raises(ConfigError, match=rf"^tune: windows must be >= 1, got {bad!r}$"):
        check_counts(what="tune", windows=bad)
    check_counts(windows=None, n=1)  # None is not checked


MODULE = """\
SCALE = 3


def make_pipeline():
    return "the pipeline"


class Models:
    @staticmethod
    def small():
        return "a small model"
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``tmp_path/user_objects_h2b.py``, with ``tmp_path`` as the working directory; the
    module is forgotten again afterwards."""
    name = "user_objects_h2b"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_dotted_module_and_attribute():
    assert load_object("tfinput._src.core.options:load_object", "--pipeline") is load_object
    assert load_object("tfinput.errors:ConfigError.__name__", "--model") == "ConfigError"


def test_module_in_the_working_directory(user_module):
    make = load_object(f"{user_module}:make_pipeline", "--pipeline")
    assert make() == "the pipeline"
    assert load_object(f"{user_module}:Models.small", "--model")() == "a small model"


def test_the_working_directory_is_on_sys_path_only_while_importing(user_module):
    before = list(sys.path)
    load_object(f"{user_module}:SCALE", "--step-fn")
    assert sys.path == before


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_path_to_a_python_file(tmp_path, monkeypatch, relative):
    path = tmp_path / "sub" / "pipelines.py"
    path.parent.mkdir()
    path.write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    spec = "sub/pipelines.py" if relative else str(path)
    assert load_object(f"{spec}:SCALE", "--pipeline") == 3
    assert load_object(f"{spec}:make_pipeline", "--pipeline")() == "the pipeline"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("make_pipeline", "--pipeline: expected MODULE:FUNCTION, got 'make_pipeline'"),
        (":make_pipeline", "--pipeline: expected MODULE:FUNCTION, got ':make_pipeline'"),
        (
            "tfinput._src.core.options:",
            "--pipeline: expected MODULE:FUNCTION, got 'tfinput._src.core.options:'",
        ),
        ("no_such_module_h2b:f", "--pipeline: cannot import 'no_such_module_h2b': No module named"),
        (
            "tfinput._src.core.options:nothing",
            "--pipeline: 'tfinput._src.core.options' has no attribute 'nothing'",
        ),
        (
            "tfinput.errors:ConfigError.nothing",
            "--pipeline: 'tfinput.errors' has no attribute 'ConfigError.nothing'",
        ),
    ],
    ids=["no-colon", "no-module", "no-attribute", "not-importable", "missing", "missing-nested"],
)
def test_errors_name_the_option_and_the_spec(spec, message):
    with pytest.raises(ConfigError) as error:
        load_object(spec, "--pipeline")
    assert str(error.value).startswith(message)


def test_missing_python_file(tmp_path):
    path = tmp_path / "nowhere.py"
    with pytest.raises(ConfigError) as error:
        load_object(f"{path}:build", "--model")
    assert str(error.value) == f"--model: no file {path}"


def test_import_error_inside_the_module(tmp_path, monkeypatch):
    (tmp_path / "broken_module_h2b.py").write_text("import not_installed_package_h2b\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        load_object("broken_module_h2b:f", "--step-fn")
    assert str(error.value) == (
        "--step-fn: cannot import 'broken_module_h2b': No module named 'not_installed_package_h2b'"
    )
    sys.modules.pop("broken_module_h2b", None)
