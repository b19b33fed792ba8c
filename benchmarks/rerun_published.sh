#!/usr/bin/env bash
# Re-run the experiments behind benchmarks/RESULTS.md whose rows are committed under results/published/GROUP.
# Every table on that page names the group it is generated from; this script is the command that made the rows.
# Usage, from the repository root, with the shared datasets prepared (python benchmarks/import_all.py
# --data-dir ~/.cache/modsar/datasets):  bash benchmarks/rerun_published.sh GROUP [GROUP ...]
# Groups, in the page's order: quickstart synthetic table4-ae tables23 video-ar-ce table5-beauty search-proof search-proof-samples search-cost
#   search-time asha-overrun search-threads residual-models residual-table2 residual-toys residual-split datasets profiles views plateau speed peers
# A group's folder is replaced. Checkpoints and Ray's own state are written beside the rows and removed once the
# group's `modsar analyze` (if any) has read them; only rows, reports and analysis tables are committed.
# Times are those of the 2-core CPU machine the page names. A run is bit-identical given its config, seed and
# modsar version (a search's ASHA decisions can differ with timing; successive halving's cannot); seconds and
# memory are not.
set -euo pipefail
root=results/published
loopback() { unshare -n sh -c 'ip link set lo up && "$@"' sh "$@"; }   # Ray binds loopback only
fresh() { rm -rf "${root:?}/$1"; mkdir -p "$root/$1"; }
train() { modsar train --quiet --results "$root/$1" "${@:2}" > /dev/null; }

for group in "$@"; do
  case $group in
  datasets)  # every shared dataset imported with its registry preprocessing
    fresh datasets
    python benchmarks/import_all.py --data-dir "${MODSAR_DATA:-$HOME/.cache/modsar/datasets}" \
        --rows "$root/datasets/datasets.parquet" ;;
  quickstart)  # the README's main job
    fresh quickstart
    loopback modsar search --space quickstart --dataset synthetic --results "$root/quickstart"
    modsar report --results "$root/quickstart" --experiment quickstart-synthetic --out "$root/quickstart/report" ;;
  synthetic)  # the quickstart base trained alone, three seeds, AE (mask 0.4) and AR, on both known-answer datasets
    fresh synthetic
    base="model.hidden_size=32 model.num_layers=2 model.num_heads=1 model.dropout=0.1 model.attn_dropout=0.1
      loss.name=ce train.optimizer=adam train.lr=0.003 train.patience=5 data.batch_size=64 train.eval_every=3
      train.threads=1 --no-checkpoint"
    for seed in 0 1 2; do
      for data in "synthetic 60" "synthetic-clusters 30"; do
        read -r name epochs <<< "$data"
        # shellcheck disable=SC2086  # the overrides are words
        train synthetic --dataset "$name" --experiment "seeds-$name" $base train.max_epochs="$epochs" seed=$seed task=ar
        # shellcheck disable=SC2086
        train synthetic --dataset "$name" --experiment "seeds-$name" $base train.max_epochs="$epochs" seed=$seed task=ae \
            mask_prob=0.4
      done
    done ;;
  search-cost)  # what each way of cheapening the headline search saves, from one probe (the estimate's replay)
    fresh search-cost
    python benchmarks/search_strategies.py --space local_attn --dataset beauty --out "$root/search-cost"
    # and every Table 5 and 6 space's default search on the datasets not yet run (~10 min; an idle machine)
    python benchmarks/table_costs.py --datasets sports video yelp --out "$root/search-cost" ;;
  search-time)  # where the README's quickstart search spends its time (idle machine), against its estimate
    fresh search-time
    scratch=$(mktemp -d)
    loopback modsar search --space quickstart --dataset synthetic --results "$scratch" --quiet > /dev/null
    python benchmarks/search_time.py --results "$scratch" --experiment quickstart-synthetic --out "$root/search-time"
    rm -rf "$scratch" ;;
  table5-beauty)  # Table 5 on Beauty: the headline search as the README gives it (the paper spaces' default
    # search, successive halving; Local-attn), its selected configs re-run on seeds 0-2, and where its time
    # went (~2 h and ~1 h of seed re-runs on 2 idle cores); then the other design choices run so far the same
    # way (SSE-PT: ~40 min and ~20 min; Loss-CE: ~1.8 h and ~27 min; Loss-BPR: ~2.3 h and ~1 h on a 3x slower
    # machine, see search.json), and Table 6's backbones (ALBERT: ~1.6 h and ~40 min; LLaMA: ~1.5 h and ~35 min;
    # Transformer-XL: ~2.1 h and ~56 min on a shared machine)
    fresh table5-beauty
    loopback modsar search --space local_attn --dataset beauty --results "$root/table5-beauty" --quiet --seeds 3
    python benchmarks/search_time.py --results "$root/table5-beauty" --experiment local_attn-beauty \
        --out "$root/table5-beauty"
    for space in ssept loss_ce loss_bpr hf_albert hf_llama hf_transfo_xl; do
      loopback modsar search --space "$space" --dataset beauty --results "$root/table5-beauty" --quiet --seeds 3
    done
    rm -rf "$root/table5-beauty"/*/ray-* ;;
  asha-overrun)  # the headline search under Ray's ASHA, the default before successive halving: seed 0 with its
    # seed re-runs (~5 h; the committed run shared the machine), then seed 1 on an idle machine (~3 h; the
    # committed rows are its first 19 AE trials: it was stopped there with Ctrl-C, its AE direction 1.5x over
    # its estimate, the finding that made successive halving the default)
    fresh asha-overrun
    loopback modsar search --space local_attn --dataset beauty --scheduler asha --seeds 3 \
        --results "$root/asha-overrun" --quiet
    loopback modsar search --space local_attn --dataset beauty --scheduler asha --seed 1 \
        --experiment local_attn-beauty-s1 --results "$root/asha-overrun" --quiet
    for experiment in local_attn-beauty local_attn-beauty-s1; do
      python benchmarks/search_time.py --results "$root/asha-overrun" --experiment "$experiment" \
          --out "$root/asha-overrun"
    done
    rm -rf "$root/asha-overrun"/*/ray-* ;;
  search-proof)  # the default search against the paper's full grid, the default run with search seeds 0, 1
    # and 2, every search's picks re-run on seeds 0-2, on synthetic, ML-100K, LastFM (capped at 50 epochs)
    # and synthetic-clusters: a day or more on 2 cores (ML-100K's full grid alone took the slower machine 9 h)
    fresh search-proof
    RESULTS="$root/search-proof" CAP_lastfm="--max-epochs 50" \
        bash benchmarks/search_proof.sh synthetic ml-100k lastfm synthetic-clusters
    rm -rf "$root"/search-proof/*/ray-* ;;
  search-proof-samples)  # the ablation of the proof's one pick outside the grid's spread: synthetic-clusters'
    # default search with seed 0 and twice the TPE trials a direction, its picks re-run on seeds 0-2 (half an hour)
    fresh search-proof-samples
    loopback modsar search --space local_attn --dataset synthetic-clusters --seed 0 --num-samples 40 --seeds 3 \
        --experiment local_attn-synthetic-clusters-s0-n40 --results "$root/search-proof-samples" --quiet
    rm -rf "$root"/search-proof-samples/*/ray-* ;;
  search-threads)  # two 1-thread trials at once vs one 2-thread trial: which a 2-core search should run
    fresh search-threads
    python benchmarks/trial_threads.py --dataset beauty --rounds 3 --out "$root/search-threads" ;;
  views)  # ML-100K: per-user vs per-item view, sampled vs full ranking, leave-one-out vs temporal split
    fresh views
    common="--dataset ml-100k --experiment views-ml-100k --no-checkpoint data.max_len=50 train.patience=5
      train.max_epochs=100 train.threads=1"
    for view in user item; do
      # shellcheck disable=SC2086
      train views $common data.view=$view eval.sampled_negatives=100
      # shellcheck disable=SC2086
      train views $common data.view=$view
    done
    # shellcheck disable=SC2086
    train views $common data.split=temporal ;;
  residual-models)  # the residual paper's five models on Toys, one budgeted search, then HRLI and mixing
    fresh residual-models
    loopback modsar search --space residual_models --dataset toys --results "$root/residual-models" \
        --experiment residual-models-toys --max-epochs 15 --cpus-per-trial 1 --max-concurrent 2
    modsar analyze --results "$root/residual-models" --experiment residual-models-toys --diagnostic hrli,mixing \
        --out "$root/residual-models/residual-models-toys-analysis" > /dev/null ;;
  residual-table2)  # the residual paper's Tables 2-3: SASRec and DuoRec, 3 seeds at 15 epochs; DuoRec 1 seed at 40
    fresh residual-table2
    bash benchmarks/residual_table2.sh toys 15
    SEEDS=1 MODELS=duorec EXPERIMENT=residual-toys-40epochs bash benchmarks/residual_table2.sh toys 40 ;;
  plateau)  # steps to leave the popularity plateau: the Table 4 configs, one factor at a time
    fresh plateau
    python benchmarks/plateau_study.py run --datasets video --tasks ar --variants bert_adamw,bert_adamw_warmup \
        --max-steps 2100
    python benchmarks/plateau_study.py run --datasets video --tasks ae --variants bert_adamw_warmup --max-steps 2057 \
        --parallel 1
    python benchmarks/plateau_study.py run --datasets ml-100k --tasks ar,ae --max-steps 400
    python benchmarks/plateau_study.py run --datasets ml-100k --tasks ae,ar --variants bert_adamw,bert_adamw_warmup \
        --max-steps 400 --seeds 1,2
    python benchmarks/plateau_study.py run --datasets ml-latest-small --tasks ar,ae \
        --variants bert_adamw,bert_adamw_warmup --max-steps 300 ;;
  residual-split)  # does the residual paper's global temporal split move SASRec's +Res? (ML-100K)
    fresh residual-split
    RESULTS="$root/residual-split" bash benchmarks/residual_split.sh ml-100k ;;
  residual-toys)  # every diagnostic on the seed-0 SASRec of residual_table2.sh (residual scaling, recovery, ...)
    fresh residual-toys
    SEEDS=1 MODELS=sasrec ROOT="$root/residual-toys" DIAGNOSTICS=sparsity,rank,hrli,shuffle,mixing,residual-scaling,nonfinal,recovery \
        bash benchmarks/residual_table2.sh toys 15 ;;
  profiles)  # modsar data profile at full size and at a matched budget of 100,000 interactions
    fresh profiles
    for name in beauty toys sports video diginetica ml-100k; do
      modsar data profile "$name" --quiet --out "$root/profiles/$name" > /dev/null
      modsar data profile "$name" --quiet --budget 100000 --out "$root/profiles/$name-100k" > /dev/null
      rm -f "$root"/profiles/"$name"*/*.png
    done ;;
  tables23)  # the ModSAR paper's Tables 2-3 on Video: Vanilla-AE, Local-AE, Vanilla-AR at 10 epochs (CPU budget)
    fresh tables23
    short="--dataset video --experiment tables23-video train.threads=1 train.max_epochs=10 train.min_steps=0"
    # shellcheck disable=SC2086  # the overrides are words
    train tables23 $short --config benchmarks/configs/video_table4_ae.yaml &
    # shellcheck disable=SC2086
    train tables23 $short --config benchmarks/configs/video_table4_ae.yaml model.local_heads=1 &
    # shellcheck disable=SC2086
    train tables23 $short --config benchmarks/configs/video_table4_ar.yaml &
    for job in $(jobs -p); do wait "$job"; done   # a failed training stops the group
    # every model by its checkpoint (--experiment would pick the best trial of each task, not all three)
    mapfile -t checkpoints < <(python -c 'import sys; from modsar.records.rows import read_rows
for path in read_rows(sys.argv[1], "tables23-video")["checkpoint"]: print(f"--checkpoint\n{path}")' "$root/tables23")
    modsar analyze "${checkpoints[@]}" --diagnostic sparsity,rank,hrli,mixing \
        --out "$root/tables23/tables23-video-analysis" > /dev/null ;;
  table4-ae)  # the ModSAR paper's Table 4 AE on Video, the config as it stands, 45 epochs (the CPU budget)
    fresh table4-ae
    train table4-ae --dataset video --config benchmarks/configs/video_table4_ae.yaml --experiment table4-video \
        --no-checkpoint train.threads=1 train.max_epochs=45 ;;
  speed)  # seconds per CE epoch of the trainer's setups, and of one full-ranking validation pass (Video);
    # run it with nothing else on the machine: times are only compared within one run
    fresh speed
    python benchmarks/epoch_time.py --dataset video --rounds 2 --threads 2 --results "$root/speed"
    python benchmarks/eval_speed.py --dataset video --threads 2 --batch-sizes 256,1024 --rounds 2 \
        --rows "$root/speed/eval_speed.parquet" ;;
  peers)  # ModSAR against pmixer/SASRec.pytorch: the same SASRec on Video, seconds per epoch and peak memory;
    # PEER is a clone of that repository outside this one (git clone https://github.com/pmixer/SASRec.pytorch)
    fresh peers
    python benchmarks/peer_speed.py --peer "${PEER:?set PEER to a clone of pmixer/SASRec.pytorch}" \
        ${PEER_COMMIT:+--peer-commit "$PEER_COMMIT"} --dataset video --rounds 2 --epochs 3 --threads 2 \
        --rows "$root/peers/peer_speed.parquet" ;;
  video-ar-ce)  # converged AR with full-softmax CE on Video (the 0.2 defaults)
    fresh video-ar-ce
    train video-ar-ce --dataset video --config benchmarks/configs/video_ar_ce_best.yaml --experiment video-ar-ce \
        --no-checkpoint train.threads=1 ;;
  *) echo "rerun_published.sh: unknown group '$group' (see the usage at the top of this file)" >&2; exit 2 ;;
  esac
  rm -rf "$root/$group"/*/checkpoints "$root/$group"/*/ray-*   # rows, reports and analyses stay
done
