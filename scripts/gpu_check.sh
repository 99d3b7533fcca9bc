#!/usr/bin/env bash
# GPU check: one verl GRPO step of a tiny self-built model, rollouts by vLLM (or SGLang) playing groundstate
# episodes through GroundstateAgentLoop; prints the step's throughput, then merges the step's checkpoint.
#
#   scripts/gpu_check.sh [OUT_DIR]                 # on a GPU machine, in the verl environment (docs/SCALE_OUT.md)
#   scripts/gpu_check.sh --prepare-only [OUT_DIR]  # anywhere: build the model and pool, check and print the recipe
#
# Hard-bounded: the whole run, start-up included, is killed after GPU_CHECK_LIMIT_S seconds (default 480 = 8 min),
# so it fits a short GPU lease; Ray is stopped afterwards either way. Environment: PYTHON (default python3),
# ROLLOUT_ENGINE (vllm or sglang, default vllm). Nothing is downloaded: the model and tokenizer are built here.
set -uo pipefail

PY=${PYTHON:-python3}
ENGINE=${ROLLOUT_ENGINE:-vllm}
LIMIT=${GPU_CHECK_LIMIT_S:-480}
MODE=run
if [[ "${1:-}" == "--prepare-only" ]]; then MODE=prepare; shift; fi
if [[ "${1:-}" == "--inner" ]]; then MODE=inner; shift; fi
OUT=${1:-runs/gpu_check}

if [[ $MODE == run ]]; then
  timeout -k 15 "$LIMIT" bash "$0" --inner "$OUT"
  rc=$?
  "$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
  if [[ $rc == 124 || $rc == 137 ]]; then echo "gpu_check: stopped at the ${LIMIT}s bound" >&2; fi
  exit $rc
fi

set -e
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)

if [[ $MODE == inner ]]; then
  command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: this needs a GPU machine (try --prepare-only)" >&2; exit 2; }
  NGPU=$(nvidia-smi -L | grep -c '^GPU' || true)
  [[ $NGPU -ge 1 ]] || { echo "gpu_check: no GPU visible" >&2; exit 2; }
  "$PY" -c "import verl, groundstate, $ENGINE" 2>/dev/null || {
    echo "gpu_check: this environment lacks verl, groundstate or $ENGINE: pip install -e '.[verl]' 'verl[$ENGINE]==0.9.1'" >&2; exit 2; }
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sed 's/^/gpu: /'
else
  NGPU=1
fi

# 1. a tiny Qwen2 and its tokenizer, built here; prompts without tool schemas keep episodes short
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
from groundstate.worlds.domain import iter_tasks, load_domain
from groundstate.train.tiny import domain_corpus, save_tiny

out = Path(sys.argv[1])
model = save_tiny(out / "model", domain_corpus(load_domain("kiosk"), repeat=2), vocab_size=1024,
                  hidden=256, layers=4, heads=4, kv_heads=2, ffn=512)
(model / "groundstate.json").write_text(json.dumps({"tools_in_prompt": False, "system_in_prompt": False}))
(out / "train.yaml").write_text("".join(f"- {t.id}\n" for t, _ in iter_tasks(["kiosk"], "pool")))
print(f"model: {sum(1 for _ in model.iterdir())} files in {model}; pool: {out / 'train.yaml'}")
EOF

# 2. the recipe: one node, every GPU, 2 tasks per GPU × 4 rollouts, one step, a checkpoint after it.
#    The base is untrained, so every group is all-0: zero-variance refill is off (--refill-ratio 0), else it never ends.
TASKS=$((2 * NGPU))
ARGS=(train --engine verl --nodes 1 --gpus-per-node "$NGPU" --tasks-per-step "$TASKS" --group-size 4 --steps 1 --save-steps 1
      --refill-ratio 0 --model "$OUT/model" --train "$OUT/train.yaml" --out "$OUT/run" --max-context 2048 --prompt-length 1024
      --max-new-tokens 64 --max-turns 4 --micro-batch 2 --rollout-engine "$ENGINE"
      --verl-set actor_rollout_ref.rollout.gpu_memory_utilization=0.4
      --verl-set actor_rollout_ref.rollout.enforce_eager=true
      --verl-set actor_rollout_ref.actor.use_torch_compile=false
      --verl-set data.dataloader_num_workers=0
      --verl-set trainer.total_epochs=1)

if [[ $MODE == prepare ]]; then
  "$PY" -m groundstate.cli "${ARGS[@]}" --dry-run
  exit $?
fi

# 3. one GRPO step
LOG="$OUT/verl.log"
T0=$(date +%s)
set +e
"$PY" -m groundstate.cli "${ARGS[@]}" 2>&1 | tee "$LOG"
STEP_RC=${PIPESTATUS[0]}
set -e
T1=$(date +%s)
[[ $STEP_RC == 0 ]] || { echo "gpu_check: verl exited with $STEP_RC (log: $LOG)" >&2; exit "$STEP_RC"; }

# 4. throughput, from verl's own step metrics (console logger: "step:1 - key:value - ...")
"$PY" - "$LOG" "$((T1 - T0))" "$TASKS" <<'EOF'
import re, sys
log, wall, tasks = open(sys.argv[1], errors="replace").read(), int(sys.argv[2]), int(sys.argv[3])
lines = [l for l in log.splitlines() if re.search(r"\bstep:1 - ", l)]
if not lines:
    sys.exit("gpu_check: no step metrics in the log")
m = dict(re.findall(r"([\w/@.\-]+):(-?[\d.]+(?:e[-+]?\d+)?)", lines[-1]))
get = lambda k: float(m[k]) if k in m else float("nan")
print(f"GPU check: 1 GRPO step, {tasks} tasks x 4 rollouts, {sys.argv[2]} s wall including start-up")
print(f"  throughput      {get('perf/throughput'):.1f} tokens/s/GPU (verl perf/throughput)")
print(f"  step time       {get('timing_s/step'):.2f} s  (generation {get('timing_s/gen'):.2f} s)")
print(f"  tokens          {get('perf/total_num_tokens'):.0f}; mean response {get('response_length/mean'):.1f} tokens")
print(f"  mean reward     {get('critic/score/mean'):.3f}")
EOF

# 5. merge the step's checkpoint into a Hugging Face directory, if the bound leaves room
if (( $(date +%s) - START < LIMIT - 90 )); then
  "$PY" -m groundstate.cli merge "$OUT/run/checkpoints" --out "$OUT/merged"
else
  echo "gpu_check: no time left to merge the checkpoint (groundstate merge $OUT/run/checkpoints --out HF_DIR)"
fi
