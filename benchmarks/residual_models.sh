#!/usr/bin/env bash
# Issue 14's reproduction: the residual-dominance paper's five models (search_spaces/residual_models.yaml) on each
# prepared dataset, then the diagnostics side by side (Figure 2: last_item_reliance.png; Table 2 in the output).
# Usage, from the repository root:  DATASETS="toys beauty" bash benchmarks/residual_models.sh [search options]
#   e.g. --max-epochs 40 to cap the budget on a small machine (say so next to the figures); PREFIX names the
#   experiments (<prefix>-<dataset>, default residual); --resume continues killed searches.
set -euo pipefail
datasets=${DATASETS:-"toys beauty sports video diginetica"}
prefix=${PREFIX:-residual}
for d in $datasets; do
  modsar search --space residual_models --dataset "$d" --experiment "$prefix-$d" --cpus-per-trial 1 \
      --max-concurrent 2 --quiet "$@"
done
experiments=()
for d in $datasets; do experiments+=(--experiment "$prefix-$d"); done
modsar analyze "${experiments[@]}" --diagnostic hrli,shuffle,mixing,residual-scaling,nonfinal,recovery --out "results/$prefix-analysis"
modsar report "${experiments[@]}" --out "results/$prefix-report"
