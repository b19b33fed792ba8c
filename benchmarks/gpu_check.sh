#!/usr/bin/env bash
# The checks that need a CUDA machine, as one script: environment, the fractional-GPU placement test (skipped
# on CPU-only machines), the training / HF / analyze tests with train.device=auto resolving to CUDA, and
# benchmarks/device_speed.py. Usage, from the repository root: bash benchmarks/gpu_check.sh [OUT_DIR]
# On a machine whose Python lacks ModSAR's dependencies (the lent H200 image has torch and transformers but no
# ray/optuna), install wheels first; the ray wheel fits a 64 MiB transfer once ray/jars, the dashboard
# client build, rllib, serve and llm are dropped from it (its RECORD rows too). Used here with jsonschema,
# referencing, rpds-py, pydantic(+core), optuna, alembic, sqlalchemy, colorlog, mako, tensorboardX:
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/env.txt"
python3 -c "import torch, ray, transformers, optuna, pyarrow, pandas, sys
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'ray', ray.__version__,
      'transformers', transformers.__version__, 'optuna', optuna.__version__, 'pyarrow', pyarrow.__version__,
      'pandas', pandas.__version__, 'cuda available', torch.cuda.is_available())" | tee -a "$out/env.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider --durations=8 \
    tests/test_search.py::test_fractional_gpus_share_one_device tests/test_train.py tests/test_model.py \
    tests/test_metrics.py tests/test_losses.py tests/test_hf_plugins.py tests/test_transfo_xl.py tests/test_analyze.py \
    tests/test_model_zoo.py 2>&1 |
    tee "$out/pytest.txt" | tail -40
timeout 150 python3 benchmarks/device_speed.py --devices cuda,cpu --backbones "modular AR ce" --epochs 3 2>&1 |
    tee "$out/speed.txt"
timeout 120 python3 benchmarks/device_speed.py --devices cuda --epochs 3 2>&1 | tee -a "$out/speed.txt"
