#!/usr/bin/env bash
# The trained policy's evaluation figures (issue 41, docs/benchmark.md "The trained policy"):
# every `oxygen eval` run the figures come from, one after another, each into OUT/<name>/.
# A run whose eval.json exists is skipped, so the script resumes where a stopped one left
# (each run takes 20-60 min on the 2-core dev machine; all of them about 3 hours).
#
#   scripts/eval_policy.sh [PARAMS_YAML] [OUT] [RUN ...]
#
# PARAMS_YAML: the node's params (default config/smol_panda.yaml: the shipped weights);
# OUT: default out/eval_policy; RUN: a subset of the names below (default: all, in order).
# The wall-clock runs want a quiet machine (nothing else running): wall_rtc_off measures the
# rate this machine holds, as `oxygen demo` does, and wall_rtc_guided runs at that rate.
# Their switches: scripts/eval_jumps.py OUT/wall_rtc_off OUT/wall_rtc_guided.
set -euo pipefail
cd "$(dirname "$0")/.."
params=${1:-config/smol_panda.yaml}
out=${2:-out/eval_policy}
shift $(( $# > 2 ? 2 : $# ))
eval_cmd=(.venv/bin/oxygen eval --params "$params")

declare -A runs=(
  [sim]="--seeds 900000-900049 --clock sim"
  [sim_cameras_off]="--seeds 900000-900049 --clock sim --cameras off"
  [sim_language_off]="--seeds 900000-900049 --clock sim --language off"
  [sim_questions]="--seeds 900000-900049 --clock sim --language questions"
  [wall_rtc_off]="--seeds 900100-900129 --clock wall --rtc off --record-cameras"
  [wall_rtc_guided]="--seeds 900100-900129 --clock wall --rtc guided --record-cameras"
  [fleet3]="--seeds 900200-900259 --clock sim --robots 3"
  [single_as_fleet]="--seeds 900200-900259 --clock sim"
)
order=(sim sim_cameras_off sim_language_off sim_questions wall_rtc_off wall_rtc_guided fleet3 single_as_fleet)
(( $# )) && order=("$@")

for name in "${order[@]}"; do
  [[ -n "${runs[$name]:-}" ]] || { echo "eval_policy.sh: no run named $name (runs: ${!runs[*]})" >&2; exit 2; }
  if [[ -f "$out/$name/eval.json" ]]; then
    echo "== $name: done ($out/$name/eval.json)"
    continue
  fi
  args=${runs[$name]}
  # the A/B at one rate: guided RTC at the rate measured for the run with it off (the demo's)
  if [[ $name == wall_rtc_guided ]]; then
    off="$out/wall_rtc_off/eval.json"
    [[ -f $off ]] || { echo "eval_policy.sh: run wall_rtc_off first (its measured rate is guided's)" >&2; exit 2; }
    args+=" --rate $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["node_control_rate_hz"])' "$off")"
  fi
  rm -rf "${out:?}/$name"
  echo "== $name: oxygen eval $args"
  # shellcheck disable=SC2086  # the run's arguments split on purpose
  "${eval_cmd[@]}" $args --out "$out/$name"
done
