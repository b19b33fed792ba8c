#!/usr/bin/env bash
# The proof that the paper spaces' default search (TPE, ASHA in steps) reaches the full grid's answer: on each
# dataset, the paper's full grid once with its selected AE and AR configs re-run on seeds 0-2 (the spread), and
# the default search on seeds 0, 1 and 2. Resumable: a search that finished is skipped, one that was cut off
# continues with --resume, so the script can be run again after a session ends.
# Usage, from the repository root, datasets prepared:
#   RESULTS=results/published/search-proof bash benchmarks/search_proof.sh synthetic ml-100k lastfm
# Extra search options (e.g. a reduced epoch cap for a larger dataset) per dataset: CAP_<dataset>="--max-epochs 50"
set -euo pipefail
results=${RESULTS:-results/published/search-proof}
space=${SPACE:-local_attn}
loopback() { unshare -n sh -c 'ip link set lo up && "$@"' sh "$@"; }   # Ray binds loopback only

status() {  # complete | running | interrupted | none
  python - "$results/$1/search.json" <<'EOF'
import json, sys
try:
    print(json.load(open(sys.argv[1])).get("status", "none"))
except (OSError, ValueError):
    print("none")
EOF
}

search() {  # experiment, then the search's options
  local experiment=$1; shift
  case $(status "$experiment") in
  complete) echo "$experiment: complete" ;;
  none) loopback modsar search --space "$space" --results "$results" --experiment "$experiment" --quiet "$@" ;;
  *) loopback modsar search --space "$space" --results "$results" --experiment "$experiment" --quiet "$@" --resume ;;
  esac
}

for data in "$@"; do
  cap_name="CAP_${data//-/_}"
  # shellcheck disable=SC2206  # the extra options are words
  cap=(${!cap_name:-})
  search "$space-$data-full-grid" --dataset "$data" --full-grid --seeds 3 "${cap[@]}"
  for seed in 0 1 2; do
    search "$space-$data-s$seed" --dataset "$data" --seed "$seed" "${cap[@]}"
  done
done
