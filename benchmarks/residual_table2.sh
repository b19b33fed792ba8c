#!/usr/bin/env bash
# The residual paper's Tables 2-3 with seeds: its SASRec and DuoRec as its code builds them (the residual_models
# space's settings, attention-output dropout included), trained on one dataset for seeds 0..SEEDS-1, then the
# mixing ratios of every checkpoint (pooled, without position 1, per layer at L, L-1, L-2) and HRLI.
# Usage, from the repository root:  bash benchmarks/residual_table2.sh [dataset] [max_epochs]   (default toys 15)
#   SEEDS=3, MODELS="sasrec duorec", DIAGNOSTICS=hrli,mixing, EXPERIMENT=residual-<dataset> by default; rows go to results/published/residual-table2 (committed), checkpoints beside them (not).
set -euo pipefail
dataset=${1:-toys}
epochs=${2:-15}
seeds=${SEEDS:-3}
root=${ROOT:-results/published/residual-table2}
experiment=${EXPERIMENT:-residual-$dataset}
mkdir -p "$root"
common="data.max_len=50 data.batch_size=256 model.hidden_size=64 model.num_layers=2 model.num_heads=2
  model.dropout=0.5 model.attn_dropout=0.5 loss.name=ce train.optimizer=adam train.lr=0.001 train.weight_decay=0.0
  train.patience=10 eval.filter_seen=history train.threads=1 train.max_epochs=$epochs
  model.init=xavier_attention model.attn_output_dropout=true model.embedding_norm=true model.ffn_size=64
  model.activation=relu model.positions_from=start"
declare -A models=(
  [sasrec]=""
  # DuoRec as that code builds it: SASRec's block (queries from LN(x), LN(x) the skip), no embedding LayerNorm
  [duorec]="model.backbone=duorec loss.cl_weight=0.1 loss.cl_temperature=1.0 loss.cl_views=un model.norm=sasrec
    model.embedding_norm=false"
)
train() {  # one model and seed; prints the checkpoint's path
  # shellcheck disable=SC2086  # the overrides are words
  modsar train --dataset "$dataset" --results "$root" --experiment "$experiment" --quiet --json task=ar \
      seed="$2" $common ${models[$1]} | python -c 'import json, sys; print(json.load(sys.stdin)["checkpoint"])'
}
jobs=()
for seed in $(seq 0 $((seeds - 1))); do
  for name in ${MODELS:-sasrec duorec}; do jobs+=("$name $seed"); done
done
running=0
for job in "${jobs[@]}"; do  # PARALLEL runs at once (default 2), one thread each
  # shellcheck disable=SC2086
  train $job > /dev/null &
  running=$((running + 1))
  if (( running >= ${PARALLEL:-2} )); then wait -n; running=$((running - 1)); fi
done
wait
# every checkpoint the experiment's rows name (a re-run with MODELS=duorec adds to the earlier rows)
mapfile -t checkpoints < <(python - "$root" "$experiment" <<'PY'
import sys
from modsar.records.rows import read_rows
for path in read_rows(sys.argv[1], sys.argv[2]).sort_values(["backbone", "seed"])["checkpoint"]:
    print(f"--checkpoint\n{path}")
PY
)
modsar analyze "${checkpoints[@]}" --diagnostic "${DIAGNOSTICS:-hrli,mixing}" --out "$root/$experiment-analysis"
