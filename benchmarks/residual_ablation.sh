#!/usr/bin/env bash
# Issue 14, Table 2: which part of the SASRec recipe sets the +Res mixing ratio on Toys (the residual paper: .123).
# Trains issue 7's SASRec (benchmarks/configs/residual_sasrec.yaml) with one change at a time, then the model as
# the residual paper's code builds it, and prints every model's HRLI and pooled mixing side by side.
# Usage, from the repository root:  bash benchmarks/residual_ablation.sh [dataset]     (default toys; ~15 min a run
# on one thread). Its figures (issue 14) are in the git history
# of benchmarks/RESULTS.md; their rows were not kept, so the page no longer shows them.
set -euo pipefail
dataset=${1:-toys}
experiment=bench-res-ablation-$dataset
paper_code="model.init=xavier_attention model.attn_output_dropout=true model.ffn_size=64 model.activation=relu
  model.ffn_inner_dropout=true model.embedding_norm=true model.positions_from=start"
declare -A variants=(
  [base]=""
  [bce]="loss.name=bce train.max_epochs=200 train.eval_every=5 train.patience=4"
  [embedding_norm]="model.embedding_norm=true"
  [positions_from_start]="model.positions_from=start"
  [xavier_attention]="model.init=xavier_attention"
  [no_attention_output_dropout]="model.attn_output_dropout=false"
  [paper_code]="$paper_code"
  [paper_code_no_attention_output_dropout]="$paper_code model.attn_output_dropout=false"
  [paper_code_dropout_0.1]="$paper_code model.dropout=0.1 model.attn_dropout=0.1"
)
checkpoints=()
for name in base bce embedding_norm positions_from_start xavier_attention no_attention_output_dropout paper_code \
    paper_code_no_attention_output_dropout paper_code_dropout_0.1; do
  # shellcheck disable=SC2086  # the overrides are words
  row=$(modsar train --dataset "$dataset" --config benchmarks/configs/residual_sasrec.yaml --experiment "$experiment" \
      --quiet --json train.threads=1 ${variants[$name]})
  checkpoints+=(--checkpoint "$(python -c 'import json, sys; print(json.load(sys.stdin)["checkpoint"])' <<< "$row")")
  echo "$name: ${checkpoints[-1]}"
done
modsar analyze "${checkpoints[@]}" --diagnostic hrli,mixing --out "results/$experiment-analysis"
