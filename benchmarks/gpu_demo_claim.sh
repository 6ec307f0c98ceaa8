#!/usr/bin/env bash
# The GPU demo from its untuned base, then the organizers' re-run of its answer.
#
# On a CUDA machine with sweeper and vLLM installed (for the offline bundle:
# `source /tmp/site/env.sh`), from the repository root:
#   bash benchmarks/gpu_demo_claim.sh LOG_DIR [N_TRIALS] [ROUNDS] [PAIRS]
# 1. `sweeper run --gpus 0` on the bundled GPU manifest (1 speculative token), with a
#    contender of 3 speculative tokens enqueued, N_TRIALS trials (default 2) and
#    ROUNDS confirmation rounds (default 4, the demo's);
# 2. `sweeper export --allow-unverified` of its answer;
# 3. `sweeper rerun` of that answer against the base manifest: PAIRS pairs (default 3),
#    each in fresh servers, alternating, at the study's sizes.
# Everything is logged under LOG_DIR as it happens (run.out, export.out, rerun.out), so
# a long run can be started with setsid nohup and followed from later calls.
set -uo pipefail
log="${1:?usage: gpu_demo_claim.sh LOG_DIR [N_TRIALS] [ROUNDS] [PAIRS]}"
trials="${2:-2}"; rounds="${3:-4}"; pairs="${4:-3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$log" && cd "$log"
base="$repo/sweeper/demo/data/manifest-gpu.json"
sizes=(--num-prompts 8 --output-len 128 --warmup-requests 1)
date -u +"start %FT%TZ" > times.txt
python3 -m sweeper run --gpus 0 --manifest "$base" --space tiny-cpu --n-trials "$trials" \
  --confirm-rounds "$rounds" --enqueue num_speculative_tokens=3 --noise 0.13 \
  --prompts "$repo/sweeper/demo/data/prompts_tuning.json" --ppl-data "$repo/sweeper/demo/data/ppl_tuning.jsonl" \
  "${sizes[@]}" --storage sqlite:///gpu-demo.db --study gpu-demo --plain > run.out 2> run.err
echo "run rc $?" >> times.txt; date -u +"run done %FT%TZ" >> times.txt
python3 -m sweeper status --storage sqlite:///gpu-demo.db --study gpu-demo > status.out 2>&1
python3 -m sweeper export --storage sqlite:///gpu-demo.db --study gpu-demo --allow-unverified \
  -o answer/manifest.json > export.out 2>&1
echo "export rc $?" >> times.txt
python3 -m sweeper rerun answer/manifest.json --base "$base" --pairs "$pairs" \
  --prompts "$repo/sweeper/demo/data/prompts_tuning.json" "${sizes[@]}" > rerun.out 2> rerun.err
echo "rerun rc $?" >> times.txt; date -u +"rerun done %FT%TZ" >> times.txt
