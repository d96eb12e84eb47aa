#!/usr/bin/env bash
# benchmarks.gpu_check on a lent GPU machine whose python3 holds torch and Lightning but not Hydra:
#
#   bash benchmarks/gpu_check.sh prepare MULTI30K_DIR   # here: wheels and Multi30k into .gpu/ (git-ignored)
#   bash benchmarks/gpu_check.sh run [gpu_check args]   # there, with .gpu carried; figures land in $OUT
#
# BUDGET (seconds, default 540) stops the check inside the call's limit; the results file keeps every part
# that ended (and each k of the k part).
set -u
case "${1:-}" in
prepare)
  mkdir -p .gpu/wheels .gpu/multi30k
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  pip wheel -q --no-deps -w .gpu/wheels hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 \
    hydra-joblib-launcher==1.2.0 sacremoses==0.2.0
  cp "$2"/*.gz .gpu/multi30k/
  ;;
run)
  shift
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl
  export PYTHONPATH=$PWD WANDB_MODE=disabled
  python3 -c "import torch, hydra, ablate.run; print('torch', torch.__version__)" || exit 3
  mkdir -p /tmp/gc && rm -f /tmp/gc/gpu_check.json
  (while sleep 5; do cp /tmp/gc/gpu_check.json "$OUT/" 2>/dev/null; done) >/dev/null 2>&1 &
  trap 'kill $! 2>/dev/null' EXIT
  timeout "${BUDGET:-540}" python3 -m benchmarks.gpu_check --out /tmp/gc --multi30k "$PWD/.gpu/multi30k" "$@" \
    >"$OUT/gpu_check.log" 2>&1
  echo "gpu_check exit $?"
  cp /tmp/gc/gpu_check.json "$OUT/"
  tail -c 4000 "$OUT/gpu_check.log"
  ;;
*) echo "usage: bash benchmarks/gpu_check.sh prepare MULTI30K_DIR | run [gpu_check args]" >&2; exit 2 ;;
esac
