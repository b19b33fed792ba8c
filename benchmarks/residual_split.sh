#!/usr/bin/env bash
# Issue 14, Table 2: does the residual paper's split (one global temporal cut) move SASRec's +Res mixing ratio?
# No shared Amazon file has timestamps, so this trains the paper's SASRec (the "paper's code" row of
# residual_ablation.sh) on a timestamped dataset under leave-one-out and under data.split=temporal (cuts at the
# 0.8 / 0.9 time quantiles, each user's first event after a cut as target), three seeds each, max length 128 as in
# the paper's code, then prints HRLI and pooled mixing for every model side by side.
# Usage, from the repository root:  bash benchmarks/residual_split.sh [dataset]   (default ml-100k, prepared
# with `modsar data prepare ml-100k --source ../shared/data/ml-100k/ml-100k.inter.gz`; ~5 min a run on one
# thread beside other jobs). Figures: benchmarks/RESULTS.md, table `residual-split`
# (bash benchmarks/rerun_published.sh residual-split writes its rows).
set -euo pipefail
dataset=${1:-ml-100k}
experiment=residual-split-$dataset
results=${RESULTS:-results}
paper_code="model.init=xavier_attention model.attn_output_dropout=false model.ffn_size=64 model.activation=relu
  model.ffn_inner_dropout=true model.embedding_norm=true model.positions_from=start data.max_len=128
  train.max_epochs=300 train.patience=5"
checkpoints=()
for split in loo temporal; do
  for seed in 0 1 2; do
    # shellcheck disable=SC2086  # the overrides are words
    row=$(modsar train --dataset "$dataset" --config benchmarks/configs/residual_sasrec.yaml \
        --results "$results" --experiment "$experiment" --quiet --json train.threads=1 $paper_code data.split=$split seed=$seed)
    checkpoints+=(--checkpoint "$(python -c 'import json, sys; print(json.load(sys.stdin)["checkpoint"])' <<< "$row")")
    python -c 'import json, sys; r = json.load(sys.stdin); print(sys.argv[1], sys.argv[2], "best epoch",
      r.get("best_epoch"), "test N@10 %.4f HR@10 %.4f" % (r["test.ndcg@10"], r["test.recall@10"]))' \
        "$split" "$seed" <<< "$row"
  done
done
modsar analyze "${checkpoints[@]}" --diagnostic hrli,mixing --out "$results/$experiment-analysis"
