#!/usr/bin/env bash
# The GPU runs, in stages under one wall-clock budget (a device command may run 600 s). The stages are data:
# benchmarks/gpu/stages.tsv (name, seconds needed, command, what); their shell functions are in
# benchmarks/gpu/functions.sh. How to stage the wheels and plan a session: docs/performance.md#gpu-stages;
# what each stage took on earlier runs: benchmarks/results/HISTORY.md#gpu-stage-timings.
#
#   bash benchmarks/h200_run.sh list                          the stages, with what each measures
#   BUDGET_S=570 bash benchmarks/h200_run.sh versions tests   stages in order; one is skipped when less of the
#                                                             budget is left than it needs
#   NAME-bg        stage NAME in the background beside the next ones, after BG_DELAY_S (default 0); waited for
#                  at the end (or at `wait-bg`)
#   pause-N        sleep N seconds
#   detach STAGE...   (first argument) the stages in a session of their own that outlives this device call;
#   wait-detached     each next call waits for it within BUDGET_S and returns what it has written so far
#
# Everything lands in H200_RESULTS (default /tmp/h200_results), packed after every stage into
# $OUT/h200_results.tgz (one file, so a stage cut short still returns what the earlier ones measured).
# Paths (defaults as the staging in docs/performance.md lays them out): SITE (vLLM, TRL: /tmp/site), SGL_SITE
# (/tmp/sgl), REALVERL_SITE (/tmp/realverl), MODEL_PARTS (/root/mp), SGL_PARTS (/root/sp), REALVERL_PARTS
# (/root/rp); GPU_STAGES: another stage table.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SITE=${SITE:-/tmp/site}
SGL_SITE=${SGL_SITE:-/tmp/sgl}
REALVERL_SITE=${REALVERL_SITE:-/tmp/realverl}
MODEL_PARTS=${MODEL_PARTS:-/root/mp}
SGL_PARTS=${SGL_PARTS:-/root/sp}
REALVERL_PARTS=${REALVERL_PARTS:-/root/rp}
GPU_STAGES=${GPU_STAGES:-$ROOT/benchmarks/gpu/stages.tsv}
OUT=${OUT:-/tmp/out}
W=${H200_RESULTS:-/tmp/h200_results}
PY=${PY:-python3}
# TOKENIZERS_PARALLELISM left unset, as a user has it: the Rust decode uses the cores
export PYTHONPATH=$SITE:$ROOT VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export ROOT SITE SGL_SITE REALVERL_SITE MODEL_PARTS SGL_PARTS REALVERL_PARTS OUT W PY
mkdir -p "$OUT" "$W"
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-570} ))
FUNCTIONS=$ROOT/benchmarks/gpu/functions.sh

pack() { tar -C "$(dirname "$W")" -czf "$OUT/h200_results.tgz" "$(basename "$W")"; }
log() { echo "$*" | tee -a "$W/run.log"; }

lookup() {  # lookup NAME: sets SECS, CMD and WHAT from the table's first row whose name (a glob) matches
    local name secs cmd what
    while IFS=$'\t' read -r name secs cmd what; do
        case $name in ''|'#'*) continue ;; esac
        # shellcheck disable=SC2053 # the row's name is a pattern
        if [[ $1 == $name ]]; then SECS=$secs; CMD=$cmd; WHAT=$what; return 0; fi
    done < "$GPU_STAGES"
    return 1
}

seconds_needed() {  # seconds_needed EXPR: the expression after shell expansion, as whole seconds (awk: 2.5 minutes work)
    local expanded
    expanded=$(STAGE=$STAGE bash -c 'source "$0" > /dev/null 2>&1; eval "printf %s \"$1\""' "$FUNCTIONS" "$1") || return 1
    awk "BEGIN { v = ($expanded); if (v != v + 0 || v < 0) exit 1; print int(v) }" 2> /dev/null
}

in_session() {  # in_session SECONDS LOG COMMAND...: COMMAND under timeout in a session of its own, and
    # afterwards whatever it left running ended (SIGTERM, 20 s, then SIGKILL): a timed-out pytest once left its
    # verl CLI child and SGLang's scheduler running on the GPU into the next stage.
    local secs=$1 log=$2 sidfile rc sid
    shift 2
    if ! setsid --help 2>&1 | grep -q -- --wait; then  # no util-linux setsid -w here: the command alone
        echo "   (no setsid -w: what the stage leaves running is not ended)" >> "$W/run.log"
        timeout --kill-after=15 "$secs" "$@" > "$log" 2>&1
        return
    fi
    sidfile=$(mktemp)
    setsid -w bash -c 'echo $$ > "$0"; exec timeout --kill-after=15 "$@"' "$sidfile" "$secs" "$@" > "$log" 2>&1
    rc=$?
    sid=$(cat "$sidfile"); rm -f "$sidfile"
    if [ -n "$sid" ] && pgrep -s "$sid" > /dev/null; then
        log "   (processes the stage left running: $(pgrep -s "$sid" | tr '\n' ' ')- ended)"
        pkill -TERM -s "$sid"
        for _ in $(seq 20); do pgrep -s "$sid" > /dev/null || break; sleep 1; done
        pkill -KILL -s "$sid" 2> /dev/null
    fi
    return $rc
}

run_stage() {  # run_stage NAME: the table's stage under what is left of the budget
    local name=$1 need left rc t0 secs
    STAGE=$name
    if ! lookup "$name"; then log "== $name: no such stage (bash benchmarks/h200_run.sh list)"; UNKNOWN=1; return; fi
    if ! need=$(seconds_needed "$SECS"); then log "== $name: its seconds ($SECS) are not a number"; UNKNOWN=1; return; fi
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then log "== $name skipped: $left s left, needs $need"; return; fi
    echo "$name: cd $ROOT && PYTHONPATH=$PYTHONPATH $CMD" >> "$W/commands.txt"
    t0=$(date +%s)
    secs=$(( left - 40 ))  # room to end what the stage leaves running and to pack
    [ "$secs" -lt 10 ] && secs=$(( left > 6 ? left - 5 : 1 ))  # (timeout 0 would mean no limit)
    in_session "$secs" "$W/$name.log" env STAGE="$name" bash -c 'source "$0" && eval "$1"' "$FUNCTIONS" "$CMD"
    rc=$?
    log "== $name rc=$rc $(( $(date +%s) - t0 )) s ($(date -u +%H:%M:%S))"
    tail -n 25 "$W/$name.log"
    pack
}

if [ "${1:-}" = list ]; then  # name, seconds needed (as the environment sets them), what
    while IFS=$'\t' read -r name secs cmd what; do
        case $name in ''|'#'*) continue ;; esac
        STAGE=$name
        printf '%-18s %6s  %s\n' "$name" "$(seconds_needed "$secs" || echo '?')" "$what"
    done < "$GPU_STAGES"
    exit 0
fi

# verl runs here from the checkout on PYTHONPATH, not pip-installed: write the entry points pip would (vLLM's plugin)
$PY benchmarks/gpu/entry_points.py "$ROOT" "$SITE" > /dev/null ||
    log "   (verl's entry points not written: vLLM's LLaVA check may fail)"

if [ "${1:-}" = detach ]; then
    shift
    echo "detached (pid file /tmp/h200_detached.pid, console $W/detached.console): $*" >> "$W/commands.txt"
    setsid nohup env OUT=/tmp/h200_detached_out bash "$0" "$@" > "$W/detached.console" 2>&1 < /dev/null &
    echo $! > /tmp/h200_detached.pid
    echo "detached run $(cat /tmp/h200_detached.pid): $*"
    exit 0
fi

UNKNOWN=0
BG_PIDS=""
wait_background() {
    local pid left
    for pid in $BG_PIDS; do
        left=$(( DEADLINE - $(date +%s) ))
        timeout $(( left > 5 ? left - 5 : 1 )) tail --pid="$pid" -f /dev/null
    done
    BG_PIDS=""
}
for s in "$@"; do
    case $s in
        wait-detached) pid=$(cat /tmp/h200_detached.pid 2> /dev/null)
            left=$(( DEADLINE - $(date +%s) - 20 ))
            [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && timeout $(( left > 1 ? left : 1 )) tail --pid="$pid" -f /dev/null
            if [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; then echo "== detached run $pid still running ($(date -u +%H:%M:%S))"
            else echo "== detached run ${pid:-none} ended ($(date -u +%H:%M:%S))"; fi
            tail -n 15 "$W/detached.console" 2> /dev/null ;;
        wait-bg) wait_background ;;
        pause-*) sleep "${s#pause-}" ;;
        *-bg) echo "$s (background after ${BG_DELAY_S:-0} s)" >> "$W/commands.txt"
            ( sleep "${BG_DELAY_S:-0}"; run_stage "${s%-bg}" > /dev/null ) &
            BG_PIDS="$BG_PIDS $!" ;;
        *) run_stage "$s" ;;
    esac
done
wait_background
cat "$W/run.log"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$W/run.log" 2>&1
pack
exit $(( UNKNOWN ? 2 : 0 ))
