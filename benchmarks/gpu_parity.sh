#!/usr/bin/env bash
# TPS parity with the harness's client on the GPU: whole runs, alternating, two servers.
#
# On the GPU machine, from the repository root, with the project's bundle installed
# (`source /tmp/site/env.sh`) and the client's file carried (see docs/measurement.md):
#
#   BENCH_SERVING=.harness-client/bench_serving.py benchmarks/gpu_parity.sh COMMAND
#
# COMMAND:
#   plan          the parts and their expected durations (no GPU work)
#   part1         server 1: BIG_ROUNDS rounds at 128x512, DEMO_ROUNDS at 48x128, then the
#                 per-request benchmark (PER_REQUEST_PASSES passes of PER_REQUEST_SIZE), on one server
#   part2         server 2: DEMO_ROUNDS rounds at 48x128 (and BIG_ROUNDS at 128x512 first with
#                 PART2_BIG=1), then the per-request benchmark, on one server
#   smoke         a server, 1 round at 8x32 and a per-request pass of 8 x 32 (the wiring, ~2-3 min)
#   start PART    run PART in the background (setsid nohup), return at once
#   follow [S]    show the running part's log for up to S seconds (default 540), until it
#                 ends; copy the results to $OUT; exit 0 when it has ended, 3 while it runs
#   collect       copy the results to $OUT
#   host PART     the host so far by PART's probe (probe.jsonl): its cpu_ms median and quartiles
#                 and quiet or busy by the confirming rule's 1 ms cut; exit 0 quiet, 1 busy, 3 no
#                 probe figures yet (no GPU work)
#
# When a part ends, its whole runs are pooled with the rounds on record
# (benchmarks/pool_parity.py, benchmarks/results/gpu-parity-rounds.csv) and the figures printed in
# its log; they are not saved there (the record is the repository's: add them with --save).
# At 128x512 the part's runs are also judged by the confirming-run rule stated in
# docs/measurement.md (benchmarks/confirm_parity.py), with the part's per-request pass if it ran.
#
# A part longer than one call (part1 is ~25 min) is started with `start part1; follow`
# and followed with `follow` in the next calls: the machine is kept only ~30 s after a
# call, so make the next call at once. Everything is logged, line by line, under
# $PARITY_DIR (default: a gpu_parity folder in the temporary directory); `collect` packs it
# into $OUT/gpu_parity.tar.gz and copies each part's log (at most 8 files come back).
#
# Each part also logs the GPU's SM and memory clocks, load, power, temperature and throttle
# reasons once a second (nvidia-smi) into gpu.csv beside its runs, whose records carry their
# unix start and end times.
#
# The client's file is copied into $PARITY_DIR/client when a part starts and the part runs that
# copy, so a later call that does not carry .harness-client cannot take it away mid-part.
#
# Settings (environment): BENCH_SERVING (required for part1/part2/smoke), MANIFEST (default
# sweeper/demo/data/manifest-gpu.json), PYTHON (default python3), BIG_ROUNDS=6, DEMO_ROUNDS=6,
# PER_REQUEST_PASSES=1, PER_REQUEST_SIZE=48x128 (PROMPTSxTOKENS of its passes), PER_REQUEST_FIRST=0
# (1: the per-request passes before the whole runs), PER_REQUEST_IF_QUIET=0 (1, with
# PER_REQUEST_FIRST=1 and PROBE_CPUS: the per-request pass only when the probe calls the host
# quiet so far, over the server's start; on a busy host the part goes straight to the whole
# runs, whose pairs go to the pool), PER_REQUEST_CONNECTION (ours's protocol in
# them: harness or keep-alive; unset: measure_tps's default), PART2_BIG=0 (BIG_ROUNDS
# given for part2 with PART2_BIG unset is refused: part2 would run none of them),
# OURS_CONNECTION (measure_tps's connection protocol for the whole runs: harness or
# keep-alive, or both, comma-separated, for a run of each in every
# round; unset: its default), OURS_IDLE_S (seconds: a further side, ours:idle, that waits this long
# before its warm-up, the server idle, as while the harness's client starts; unset: no such side),
# TPS_GUESS=750 (tok/s, for `plan` only), PART_BUDGET_S
# (start no round that would end later than this many seconds after the part began, and no
# per-request pass with less than 60 s left; unset: no limit), SERVER_CPUS / CLIENT_CPUS (a CPU
# list such as 2-5: the server's processes, or the clients, on those CPUs only; unset: anywhere),
# PROBE_CPUS (a CPU list such as 13: run benchmarks/host_probe.py there through the part, into
# probe.jsonl, and give each whole run the probe's figures and the summary the ratio at equal
# host speed; unset: no probe).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
PARITY_DIR=${PARITY_DIR:-${TMPDIR:-/tmp}/gpu_parity}
MANIFEST=${MANIFEST:-sweeper/demo/data/manifest-gpu.json}
PYTHON=${PYTHON:-python3}
# part2 has rounds at 128x512 only with PART2_BIG=1: BIG_ROUNDS given for it with PART2_BIG unset
# is a mistake (on the device it costs a server start and a session's last minutes), not a default
BIG_ROUNDS_GIVEN=${BIG_ROUNDS:+1} PART2_BIG_GIVEN=${PART2_BIG:+1}
BIG_ROUNDS=${BIG_ROUNDS:-6}
DEMO_ROUNDS=${DEMO_ROUNDS:-6}
PER_REQUEST_PASSES=${PER_REQUEST_PASSES:-1}
PER_REQUEST_SIZE=${PER_REQUEST_SIZE:-48x128}
PART2_BIG=${PART2_BIG:-0}
TPS_GUESS=${TPS_GUESS:-750}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$PARITY_DIR" && PARITY_DIR=$(cd "$PARITY_DIR" && pwd)

need_client() {
    if [ -z "${BENCH_SERVING:-}" ] || [ ! -f "$BENCH_SERVING" ]; then
        echo "set BENCH_SERVING to the sglang 0.5.2 bench_serving.py (see docs/measurement.md)" >&2
        exit 2
    fi
    BENCH_SERVING=$(cd "$(dirname "$BENCH_SERVING")" && pwd)/$(basename "$BENCH_SERVING")
    # the part runs a copy of its own under $PARITY_DIR: the device's calls re-copy the working tree
    # and drop the ignored files a call does not carry, so the checkout's file may vanish mid-part
    local copy="$PARITY_DIR/client/$(basename "$BENCH_SERVING")"
    if [ "$BENCH_SERVING" != "$copy" ]; then
        mkdir -p "$PARITY_DIR/client" && cp "$BENCH_SERVING" "$copy" || {
            echo "could not copy $BENCH_SERVING into $PARITY_DIR/client" >&2; exit 2; }
    fi
    BENCH_SERVING=$copy
    export BENCH_SERVING
}

check_part() {
    if [ "$1" = part2 ] && [ -n "$BIG_ROUNDS_GIVEN" ] && [ -z "$PART2_BIG_GIVEN" ] && [ "$BIG_ROUNDS" != 0 ]; then
        echo "part2 runs no rounds at 128x512 unless PART2_BIG=1: set PART2_BIG=1 for BIG_ROUNDS=$BIG_ROUNDS there, or PART2_BIG=0 for none" >&2
        exit 2
    fi
}

# the steps run against the server hold_server.py started (its URL, name and pid in the env)
steps() {
    local part=$1; shift
    local dir="$PARITY_DIR/$part"
    mkdir -p "$dir"
    local status=0
    if [ "${PER_REQUEST_FIRST:-0}" = 1 ]; then
        if [ "${PER_REQUEST_IF_QUIET:-0}" = 1 ] && [ -n "${PROBE_CPUS:-}" ] && ! host_so_far "$part"; then
            echo "== $part: the host is not quiet so far, so no per-request pass (PER_REQUEST_IF_QUIET=1)"
        else
            per_request "$part" || status=1
        fi
    fi
    for size_rounds in "$@"; do
        local size=${size_rounds%:*} rounds=${size_rounds#*:} budget=()
        if [ -n "${PART_DEADLINE:-}" ]; then budget=(--budget-s "$((PART_DEADLINE - $(date +%s)))"); fi
        echo "== $part: whole runs at $size, $rounds rounds ($(date +%T)) ${budget[*]}"
        "$PYTHON" benchmarks/tps_vs_harness_client.py "${budget[@]}" --client-script "$BENCH_SERVING" \
            --manifest "$MANIFEST" --base-url "$PARITY_BASE_URL" --model "$PARITY_MODEL" \
            --server-pid "$PARITY_SERVER_PID" --sizes "$size" --rounds "$rounds" \
            --work-dir "$dir/runs-$size" --out "$dir/whole-$size.json" \
            ${OURS_CONNECTION:+--ours-connection "$OURS_CONNECTION"} \
            ${OURS_IDLE_S:+--ours-idle-s "$OURS_IDLE_S"} \
            ${PROBE_CPUS:+--probe-log "$dir/probe.jsonl"} || status=1
    done
    if [ "${PER_REQUEST_FIRST:-0}" != 1 ]; then per_request "$part" || status=1; fi
    echo "== $part: steps done ($(date +%T)), status $status"
    return $status
}

# the host so far by the part's probe, judged as confirm_parity.py judges the host before the
# rounds (parity.host_state, the fixed parity.QUIET_CPU_MS): exit 0 quiet, 1 busy, 3 no figures
host_so_far() {
    PYTHONPATH="$ROOT/benchmarks${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - "$PARITY_DIR/$1/probe.jsonl" "$1" <<'PY'
import os
import sys
import parity
state = parity.host_state(parity.load_probe(sys.argv[1]) if os.path.exists(sys.argv[1]) else [])
if state is None:
    print(f"== {sys.argv[2]}: no probe figures in {sys.argv[1]}")
    sys.exit(3)
print(f"== {sys.argv[2]}: the host so far: {state.describe()}")
sys.exit(0 if state.quiet else 1)
PY
}

# the per-request benchmark on the part's server: PER_REQUEST_PASSES passes of PER_REQUEST_SIZE
per_request() {
    local part=$1 dir="$PARITY_DIR/$1"
    local pr_prompts=${PER_REQUEST_SIZE%x*} pr_len=${PER_REQUEST_SIZE#*x}
    [ "$part" = smoke ] && pr_prompts=8 pr_len=32
    if [ -n "${PART_DEADLINE:-}" ] && [ $((PART_DEADLINE - $(date +%s))) -lt 60 ]; then
        echo "== $part: PART_BUDGET_S spent, no per-request pass"
    elif [ "$PER_REQUEST_PASSES" -gt 0 ]; then
        echo "== $part: per request, $PER_REQUEST_PASSES passes of $pr_prompts x $pr_len ($(date +%T))"
        "$PYTHON" benchmarks/tps_client_per_request.py --client-script "$BENCH_SERVING" \
            --base-url "$PARITY_BASE_URL" --model "$PARITY_MODEL" --manifest "$MANIFEST" \
            --num-prompts "$pr_prompts" --output-len "$pr_len" --passes "$PER_REQUEST_PASSES" \
            ${PER_REQUEST_CONNECTION:+--connection "$PER_REQUEST_CONNECTION"} \
            --json "$dir/per-request.json" || return 1
    fi
}

run_part() {
    local part=$1
    check_part "$part"
    need_client
    local sizes
    case $part in
        part1) sizes=("128x512:$BIG_ROUNDS" "48x128:$DEMO_ROUNDS") ;;
        part2) if [ "$PART2_BIG" = 1 ]; then sizes=("128x512:$BIG_ROUNDS" "48x128:$DEMO_ROUNDS")
               else sizes=("48x128:$DEMO_ROUNDS"); fi ;;
        smoke) sizes=("8x32:1") ;;
        *) echo "unknown part $part" >&2; exit 2 ;;
    esac
    mkdir -p "$PARITY_DIR/$part"
    rm -f "$PARITY_DIR/$part.done"
    local label; label="$(date -u +%FT%H:%MZ)-$part"  # the part's rounds, as pool_parity.py names them
    if [ -n "${PART_BUDGET_S:-}" ]; then export PART_DEADLINE=$(( $(date +%s) + PART_BUDGET_S )); fi
    {
        echo "== $part began $(date '+%F %T'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
        "$PYTHON" -c 'import vllm, sys; print("vllm", vllm.__version__, "python", sys.version.split()[0])' 2>&1
        echo "== CPUs: $(nproc) online; SMT siblings: $(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ')"
        echo "== NUMA: $(lscpu 2>/dev/null | grep -i 'numa node.*cpu' | tr -s ' ' | tr '\n' ';')"
        # the GPU's clocks, load, power and throttle reasons once a second, beside the runs' unix times
        local smi_pid=""
        if command -v nvidia-smi > /dev/null; then
            nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw,temperature.gpu,clocks_throttle_reasons.active \
                --format=csv -lms 1000 > "$PARITY_DIR/$part/gpu.csv" 2>&1 &
            smi_pid=$!
        fi
        # the host's speed, second by second, on cores of its own (host_probe.py: a covariate for the runs)
        local probe_pid=""
        if [ -n "${PROBE_CPUS:-}" ]; then
            "$PYTHON" benchmarks/host_probe.py --cpus "$PROBE_CPUS" --out "$PARITY_DIR/$part/probe.jsonl" \
                > "$PARITY_DIR/$part/probe.log" 2>&1 &
            probe_pid=$!
        fi
        "$PYTHON" benchmarks/hold_server.py --manifest "$MANIFEST" --log "$PARITY_DIR/$part/server.log" \
            ${SERVER_CPUS:+--server-cpus "$SERVER_CPUS"} ${CLIENT_CPUS:+--client-cpus "$CLIENT_CPUS"} \
            -- bash "$0" _steps "$part" "${sizes[@]}"
        local code=$?
        [ -n "$smi_pid" ] && kill "$smi_pid" 2> /dev/null
        [ -n "$probe_pid" ] && kill "$probe_pid" 2> /dev/null
        pool_with_record "$part" "$label"
        confirming_run "$part"
        echo "== $part ended $(date '+%F %T') with exit code $code"
        echo "$code" > "$PARITY_DIR/$part.done"
    } 2>&1 | tee -a "$PARITY_DIR/$part.log"
    # the part's own exit code (the group above ends with writing it, so its status is always 0)
    return "$(cat "$PARITY_DIR/$part.done" 2> /dev/null || echo 1)"
}

# the part's whole runs pooled with the rounds on record (pool_parity.py; printed, not saved: add
# them to benchmarks/results/gpu-parity-rounds.csv with --save where the repository is)
pool_with_record() {
    local part=$1 label=$2 file size connection=${OURS_CONNECTION:-harness}
    for file in "$PARITY_DIR/$part"/whole-*.json; do
        [ -f "$file" ] || continue
        size=$(basename "$file" .json); size=${size#whole-}
        echo "== $part: $size pooled with the rounds on record (server CPUs ${SERVER_CPUS:-any}, ours ${connection%%,*})"
        "$PYTHON" benchmarks/pool_parity.py --add "$label=$file" --server-cpus "${SERVER_CPUS:-any}" \
            --size "$size" --ours-connection "${connection%%,*}" || true
    done
}

# issue 19's confirming-run rule (benchmarks/confirm_parity.py) applied to the part's runs at 128x512
confirming_run() {
    local dir="$PARITY_DIR/$1" per_request=()
    [ -f "$dir/whole-128x512.json" ] || return 0
    [ -f "$dir/per-request.json" ] && per_request=(--per-request "$dir/per-request.json")
    echo "== $1: the confirming-run rule"
    "$PYTHON" benchmarks/confirm_parity.py "$dir/whole-128x512.json" "${per_request[@]}" || true
}

collect() {
    [ -n "${OUT:-}" ] || { echo "OUT is not set: nothing collected (results stay in $PARITY_DIR)"; return 0; }
    tar -czf "$OUT/gpu_parity.tar.gz" -C "$PARITY_DIR" . 2>/dev/null
    for log in "$PARITY_DIR"/part1.log "$PARITY_DIR"/part2.log "$PARITY_DIR"/smoke.log; do
        [ -f "$log" ] && cp "$log" "$OUT/"
    done
    echo "collected into \$OUT: $(ls "$OUT" | tr '\n' ' ')"
}

follow() {
    local limit=${1:-540} part
    part=$(cat "$PARITY_DIR/running" 2>/dev/null) || { echo "no part was started"; collect; return 0; }
    local log="$PARITY_DIR/$part.log" shown=0 began=$SECONDS
    while :; do
        if [ -f "$log" ]; then
            local lines; lines=$(wc -l < "$log")
            if [ "$lines" -gt "$shown" ]; then tail -n +"$((shown + 1))" "$log" | head -n "$((lines - shown))"; shown=$lines; fi
        fi
        if [ -f "$PARITY_DIR/$part.done" ]; then echo "== $part has ended"; collect; return 0; fi
        if [ $((SECONDS - began)) -ge "$limit" ]; then
            echo "== $part still running after ${limit} s of following: call 'follow' again now"
            collect; return 3
        fi
        sleep 5
    done
}

plan() {
    local big=$((128 * 512 / TPS_GUESS + 8)) demo=$((48 * 128 / TPS_GUESS + 8)) start=150
    local per=$((PER_REQUEST_PASSES * 2 * ${PER_REQUEST_SIZE%x*} * ${PER_REQUEST_SIZE#*x} / TPS_GUESS + 20))
    local commas=${OURS_CONNECTION:-x}; commas=${commas//[^,]/}
    local idle=0; [ -n "${OURS_IDLE_S:-}" ] && idle=1
    local runs=$((2 + ${#commas} + idle))  # the harness, one run per protocol of ours, and ours:idle
    local p1=$((start + runs * BIG_ROUNDS * big + runs * DEMO_ROUNDS * demo + per))
    local p2=$((start + runs * DEMO_ROUNDS * demo + per))
    [ "$PART2_BIG" = 1 ] && p2=$((p2 + runs * BIG_ROUNDS * big))
    echo "at about $TPS_GUESS tok/s, a server start of ~${start} s and ~8 s of client start-up per run,"
    echo "$runs runs a round:"
    echo "  one run at 128x512 ~${big} s, at 48x128 ~${demo} s; per-request benchmark ~${per} s"
    echo "  part1 ~$((p1 / 60)) min $((p1 % 60)) s  (start part1; follow; follow; ...: longer than one call)"
    echo "  part2 ~$((p2 / 60)) min $((p2 % 60)) s"
    echo "  smoke ~3 min"
}

case ${1:-} in
    _steps) shift; steps "$@" ;;
    part1|part2|smoke) run_part "$1" ;;
    start)
        part=${2:?start needs a part}
        check_part "$part"
        need_client
        echo "$part" > "$PARITY_DIR/running"
        rm -f "$PARITY_DIR/$part.done"
        BENCH_SERVING=$BENCH_SERVING setsid nohup bash "$0" "$part" > "$PARITY_DIR/$part.nohup" 2>&1 < /dev/null &
        echo "started $part in the background (pid $!); log $PARITY_DIR/$part.log"
        ;;
    follow) follow "${2:-540}" ;;
    collect) collect ;;
    host) [ -n "${2:-}" ] || { echo "host needs a part: host part1" >&2; exit 2; }; host_so_far "$2" ;;
    plan) plan ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
esac
