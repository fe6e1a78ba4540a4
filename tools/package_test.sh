#!/usr/bin/env bash
# `make package-test`: pip install . into a fresh virtual environment that has torch==2.13.0,
# building the wheel with scikit-build-core from scratch, then check that cdynamo imports
# and compiles outside the source tree and that the wheel's metadata pins torch.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PY=${PYTHON_BOOT:-python3.11}
"$PY" -m venv "$WORK/venv"
V="$WORK/venv/bin"
"$V/pip" install -q --disable-pip-version-check torch==2.13.0 "scikit-build-core>=0.9" "cmake>=3.24" ninja
# From a clean export of HEAD, as a user's checkout is: the development build leaves its
# extension in src/cdynamo/, which the wheel's package copy would pick up.
mkdir "$WORK/src" && git -C "$ROOT" archive HEAD | tar -x -C "$WORK/src"
# No build isolation: the build reads the installed torch's headers and version.
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$V/pip" install -q --disable-pip-version-check --no-build-isolation "$WORK/src"
cd "$WORK"
"$V/python" - "$ROOT" <<'PY'
import importlib.metadata as md, os, sys
import torch, cdynamo
root = sys.argv[1]
assert not cdynamo.__file__.startswith(root), cdynamo.__file__
f = cdynamo.compile(lambda x: (x * 2).relu(), backend="eager")
x = torch.randn(4)
assert torch.equal(f(x), (x * 2).relu())
assert cdynamo.stats()["frames_captured"] == 1
requires = md.requires("cdynamo")
assert "torch==2.13.0" in requires, requires
files = [str(p) for p in md.files("cdynamo")]
assert any(p.startswith("cdynamo/_C") for p in files) and "cdynamo-env.pth" in files, files
print("package-test: ok:", cdynamo.__file__, requires)
PY
CDYNAMO=1 "$V/python" -c "import sys, torch; assert sys.modules['cdynamo'].installed(); print('package-test: CDYNAMO=1 ok')"
