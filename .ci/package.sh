#!/usr/bin/env bash
# Packaging check (run by `./dev package` and CI): build the sdist and the wheel with no
# warnings, install the wheel (not editable, without its dependencies) into a fresh
# virtual environment layered over the running one, and run the installed command and
# all three packages from outside the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/tfinput-package.XXXXXX)
trap 'rm -rf "$work"' EXIT

python -m pip install -q build >&2
log="$work/build.log"
if ! python -m build --sdist --wheel --outdir "$work/dist" . >"$log" 2>&1; then
  cat "$log" >&2
  echo "package: the build failed" >&2
  exit 1
fi
# Not warnings about the package: PYTHONDONTWRITEBYTECODE=1 in the environment, pip's
# notes about a local index directory that lacks a project, and the build's lines that
# name the files it copies (tfinput/deprecation.py is a module, not a warning).
if grep -inE "warning|deprecat" "$log" \
  | grep -vE "byte-compiling is disabled|Location 'file:|^[0-9]+:(copying|adding|creating) " >&2; then
  echo "package: the build printed the warnings above (full log: python -m build)" >&2
  exit 1
fi
wheel=$(ls "$work"/dist/tfinput-*.whl)
echo "package: built $(cd "$work/dist" && ls | tr '\n' ' ')" >&2

# The wheel alone goes into a fresh environment; its dependencies come from the one
# running this check, layered under it by a path file (that environment resolved the
# same requirements from pyproject when ./dev installed it; unpacking TensorFlow and the
# rest again would cost a core-minute). The environment's own site-packages comes first
# on sys.path, and a path file does not run the editable install's import hook there,
# so the installed copy of tfinput is what imports (asserted below).
python -m venv "$work/venv"
base=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$work/venv/bin/python" -m pip install -q --no-deps --no-compile "$wheel" >&2
echo "$base" >"$own/_tfinput_check_dependencies.pth"
cd "$work"   # away from the source tree, so the installed copy is what runs
"$work/venv/bin/tfinput" demo --help >/dev/null
"$work/venv/bin/python" - "$own" <<'PY'
import pathlib
import sys

OWN = pathlib.Path(sys.argv[1]).resolve()

import profiles
import tfinput
import tuners

for m in (tfinput, tuners, profiles):
    where = pathlib.Path(m.__file__).resolve()
    assert where.is_relative_to(OWN), f"{m.__name__} imported from {where}, not {OWN}"
    assert (where.parent / "py.typed").exists(), f"{m.__name__} has no py.typed marker"
print("package: wheel installs; tfinput, tuners, profiles import from", where.parents[1])
PY
"$work/venv/bin/tfinput" --version
