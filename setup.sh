#!/usr/bin/env bash
# Set up gpt2_posheads in ./.venv (or the active virtualenv/conda env) and install its packages.
#   bash setup.sh          # library + dev tools (pytest)
# Torch: an importable torch is kept (your CUDA build stays). Otherwise, with an NVIDIA GPU the
# default (CUDA) build is installed; without one the CPU build is chosen (a local CPU wheel on pip's
# find-links when there is one, else PyTorch's CPU index) so no gigabytes of CUDA libraries come down.
set -euo pipefail
cd "$(dirname "$0")"

if [[ -n "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]]; then
  PY=python
else
  [[ -x .venv/bin/python ]] || python3 -m venv --system-site-packages .venv
  PY=.venv/bin/python
fi
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@" 2>&1 | grep -v "is ignored: it is neither" || true; }

if "$PY" -c "import torch" 2>/dev/null; then
  echo "torch $("$PY" -c 'import torch; print(torch.__version__)') already installed: keeping it"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "NVIDIA GPU found: installing the default (CUDA) torch"
  pip_install torch
else
  local_wheel=""
  for d in $("$PY" -m pip config get global.find-links 2>/dev/null) ${PIP_FIND_LINKS:-}; do
    d="${d#file://}"
    [[ -d "$d" ]] && local_wheel=$(ls "$d"/torch-*+cpu-*.whl 2>/dev/null | head -n1) && [[ -n "$local_wheel" ]] && break
  done
  if [[ -n "$local_wheel" ]]; then
    version=$(basename "$local_wheel" | sed -E 's/^torch-([0-9.]+)\+cpu.*/\1/')
    echo "no GPU: installing the local CPU torch wheel ($version)"
    pip_install "torch==$version"
  else
    echo "no GPU: installing torch from PyTorch's CPU index"
    pip_install torch --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$PY" -W ignore -c "import torch" || { echo "torch failed to install" >&2; exit 1; }

pip_install -e ".[dev]"

# PNG export of plotly figures needs a Chromium; Debian's package works with kaleido.
if ! command -v chromium >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "note: chromium install failed; figures will be written as HTML only"
  else
    echo "note: no Chromium found; install one (e.g. apt-get install chromium) for PNG figures, HTML is written regardless"
  fi
fi
"$PY" -c "import gpt2_posheads, importlib.metadata as m; print('gpt2_posheads ready: torch', m.version('torch'), '| transformer-lens', m.version('transformer-lens'))"
