#!/usr/bin/env bash
# The proof that the paper spaces' default search (TPE, ASHA in steps) reaches the full grid's answer: on each
# dataset, the paper's full grid once and the default search with search seeds 0, 1 and 2, each search's
# selected AE and AR configs re-run on seeds 0-2 (`--seeds 3`, as the headline command is run), so that each
# search's verdict rests on three seeds, the grid's as the default's. Resumable: a search that finished
# (with its seed re-runs) is skipped, one that was cut off continues with --resume, so the script can be run
# again after a session ends, on any machine (a search goes on from its rows).
# Usage, from the repository root, datasets prepared:
#   RESULTS=results/published/search-proof bash benchmarks/search_proof.sh synthetic ml-100k lastfm synthetic-clusters
# Extra search options (e.g. a reduced epoch cap for a larger dataset) per dataset: CAP_<dataset>="--max-epochs 50"
set -euo pipefail
results=${RESULTS:-results/published/search-proof}
space=${SPACE:-local_attn}
loopback() { unshare -n sh -c 'ip link set lo up && "$@"' sh "$@"; }   # Ray binds loopback only

status() {  # complete | running | interrupted | none, the seed re-runs it records, its scheduler: "complete 3 asha"
  python - "$results/$1/search.json" <<'EOF'
import json, sys
try:
    stored = json.load(open(sys.argv[1]))
    kind = (stored.get("asha") or {}).get("kind", "asha")  # before scheduler kinds were recorded: asha
    print(stored.get("status", "none"), (stored.get("request") or {}).get("seeds", 0), kind)
except (OSError, ValueError):
    print("none 0 -")
EOF
}

search() {  # experiment, then the search's options; every search re-runs its selected configs on seeds 0-2
  local experiment=$1 state recorded kind; shift
  read -r state recorded kind <<<"$(status "$experiment")"
  local run=(modsar search --space "$space" --results "$results" --experiment "$experiment" --quiet --seeds 3 "$@")
  if [[ $state == complete && $recorded -ge 3 ]]; then
    echo "$experiment: complete"
  elif [[ $state == none ]]; then
    loopback "${run[@]}"
  else  # cut off, or complete before its seed re-runs: goes on from its rows, under the scheduler it began with
    loopback "${run[@]}" --resume --scheduler "$kind"
  fi
}

for data in "$@"; do
  cap_name="CAP_${data//-/_}"
  # shellcheck disable=SC2206  # the extra options are words
  cap=(${!cap_name:-})
  search "$space-$data-full-grid" --dataset "$data" --full-grid "${cap[@]}"
  for seed in 0 1 2; do
    search "$space-$data-s$seed" --dataset "$data" --seed "$seed" "${cap[@]}"
  done
done
