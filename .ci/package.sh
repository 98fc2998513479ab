#!/usr/bin/env bash
# Packaging check (run by `./dev package` and CI): build the sdist and the wheel with no
# warnings, install the wheel (not editable) into a fresh virtual environment, and run
# the installed command and all three packages from outside the source tree.
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
# Not warnings about the package: PYTHONDONTWRITEBYTECODE=1 in the environment, and
# pip's notes about a local index directory that lacks a project.
if grep -inE "warning|deprecat" "$log" | grep -vE "byte-compiling is disabled|Location 'file:" >&2; then
  echo "package: the build printed the warnings above (full log: python -m build)" >&2
  exit 1
fi
wheel=$(ls "$work"/dist/tfinput-*.whl)
echo "package: built $(cd "$work/dist" && ls | tr '\n' ' ')" >&2

python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip >&2
# --no-compile: byte-compiling TensorFlow and the rest takes a core-minute, and this
# check imports only tfinput's light top-level modules.
"$work/venv/bin/python" -m pip install -q --no-compile "$wheel" >&2
cd "$work"   # away from the source tree, so the installed copy is what runs
"$work/venv/bin/tfinput" demo --help >/dev/null
"$work/venv/bin/python" - <<'PY'
import pathlib

import profiles
import tfinput
import tuners

for m in (tfinput, tuners, profiles):
    where = pathlib.Path(m.__file__).resolve()
    assert "site-packages" in where.parts, f"{m.__name__} imported from {where}"
    assert (where.parent / "py.typed").exists(), f"{m.__name__} has no py.typed marker"
print("package: wheel installs; tfinput, tuners, profiles import from", where.parents[1])
PY
"$work/venv/bin/tfinput" --version
