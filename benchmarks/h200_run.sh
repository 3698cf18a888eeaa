#!/usr/bin/env bash
# The GPU runs of issue 19 on the H200, in stages under one wall-clock budget (a device command may
# run 600 s), after the staged wheels are installed (python3 ../shared/gpu/stage_wheels.py vllm==0.26.0
# trl==1.16.0 datasets; see its docstring):
#
#   bash /root/wp/install.sh && BUDGET_S=570 bash benchmarks/h200_run.sh versions tests rollout
#   BUDGET_S=570 bash benchmarks/h200_run.sh e2e-a
#   BUDGET_S=570 bash benchmarks/h200_run.sh e2e-b
#
# Seconds seen on 2026-12-01: versions 30, tests 213, rollout > 183 (cut short during batch 512; allow
# ~260), e2e-a 237 (verl-vllm 110 + trl-vllm 108 + model build), e2e-b > 228 (verl-vllm alone 183; TRL ~19 s
# a step, so allow ~450).
#
# Stages (each skipped when less time is left than it needs):
#   versions    torch / vLLM / CUDA / transformers / TRL versions and the GPU, as JSON
#   tests       pytest -m gpu tests/test_gpu_vllm.py (junit XML for the counts)
#   cuda-tests  the rest of the suite's CUDA tests: pytest tests -k "cuda or gpu"
#   rollout     benchmarks/rollout.py: verl's VLLMRollout vs raw LLM.generate at 64 / 256 / 512 sequences
#   e2e-a       benchmarks/e2e_grpo.py, SmolLM2-135M architecture, 16 prompts x 8 x 128 tokens
#   e2e-b       the same, Qwen2.5-1.5B architecture, 32 prompts x 8 x 512 tokens
#   e2e-c       the same, Qwen2.5-7B architecture with LoRA rank 16, 16 prompts x 8 x 512 tokens
# verl runs with its default settings in every e2e stage (no micro-batch or packing flags).
# Everything lands in /tmp/h200_results, packed after every stage into $OUT/h200_results.tgz (one file,
# so a stage cut short still returns what the earlier ones measured).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH=/tmp/site:$ROOT VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}
W=/tmp/h200_results
mkdir -p "$OUT" "$W"
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-570} ))
PY=python3

pack() { tar -C /tmp -czf "$OUT/h200_results.tgz" h200_results; }

stage() {  # stage NAME SECONDS_NEEDED COMMAND...
    local name=$1 need=$2 left rc t0
    shift 2
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then
        echo "== $name skipped: $left s left, needs $need" | tee -a "$W/run.log"
        return
    fi
    echo "$name: cd $ROOT && PYTHONPATH=/tmp/site:. VLLM_USE_FLASHINFER_SAMPLER=0 $*" >> "$W/commands.txt"
    t0=$(date +%s)
    timeout $(( left - 5 )) "$@" > "$W/$name.log" 2>&1
    rc=$?
    echo "== $name rc=$rc $(( $(date +%s) - t0 )) s ($(date -u +%H:%M:%S))" | tee -a "$W/run.log"
    tail -n 25 "$W/$name.log"
    pack
}

for s in "$@"; do
    case $s in
        versions) stage versions 10 $PY -c "
import json, platform, torch, transformers
info = dict(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
            python=platform.python_version(), gpu=torch.cuda.get_device_name(0),
            gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
for name in ('vllm', 'trl', 'datasets', 'peft'):
    try:
        info[name] = __import__(name).__version__
    except Exception as exc:
        info[name] = 'missing: %s' % exc
json.dump(info, open('$W/versions.json', 'w'), indent=1)
print(info)" ;;
        tests) stage tests 200 $PY -m pytest -m gpu tests/test_gpu_vllm.py -q -rA -p no:cacheprovider \
                   --junitxml="$W/gpu_tests.xml" ;;
        cuda-tests) stage cuda-tests 150 $PY -m pytest tests -q -rA -p no:cacheprovider -k "cuda or gpu" \
                   --ignore=tests/test_gpu_vllm.py --ignore=tests/test_docker_files.py --junitxml="$W/cuda_tests.xml" ;;
        rollout) stage rollout 270 $PY benchmarks/rollout.py --device cuda --model random:smollm2 --batches 64 256 512 \
                   --n 4 --max_new_tokens 256 --repeats 3 --skip_hf --sleep --out "$W/rollout_h200.json" ;;
        e2e-a) stage e2e-a 240 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --prompts 16 \
                   --group 8 --max-new-tokens 128 --steps 3 --warmup 1 --timeout 240 --out "$W/e2e_a" --logs "$W/e2e_a" ;;
        e2e-b) stage e2e-b 450 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-1.5b \
                   --prompts 32 --group 8 --max-new-tokens 512 --steps 2 --warmup 1 --timeout 300 --out "$W/e2e_b" \
                   --logs "$W/e2e_b" ;;
        e2e-c) stage e2e-c 300 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-7b \
                   --lora-rank 16 --prompts 16 --group 8 --max-new-tokens 512 --steps 2 --warmup 1 --timeout 400 \
                   --out "$W/e2e_c" --logs "$W/e2e_c" ;;
        *) echo "unknown stage $s" ;;
    esac
done
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$W/run.log" 2>&1
pack
