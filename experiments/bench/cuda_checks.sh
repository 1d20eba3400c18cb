#!/usr/bin/env bash
# lmprobe on a CUDA GPU in one call of the device tool (a lent machine's image has jax, torch and
# transformers; lmprobe runs from the checkout). Each stage has its own time limit and log under $OUT;
# a stage that fails does not stop the next. Prepare the bundle here first:
#
#   python -m experiments.bench.random_weights bundle .gpu/models smollm2-135m gemma3-270m qwen2.5-coder-1.5b
#   (cd .gpu && tar czf models.tgz models); python3 -m pip download --no-deps --only-binary=:all: \
#       --python-version 3.12 -d .gpu/whl gguf==0.19.0     # what the image lacks (flax 0.12.8 does not import
#       on the image's jax 0.11.2: its own flax 0.12.10 is used)
#   python -m experiments.bench.random_weights corpus .gpu/fortunes.jsonl
#
# then run `bash experiments/bench/cuda_checks.sh` there, carrying .gpu/models.tgz, .gpu/whl and
# .gpu/fortunes.jsonl. Stages: throughput (bf16 tokens/s and MFU) of the three models' architectures with
# random weights (speed only: the weights cannot travel); the model and attention tests on CUDA (cuDNN
# attention on bf16 inputs, parity with transformers' PyTorch models); BYOD on 1000 examples.
# Figures and what was seen: docs/performance.md, "On a CUDA GPU".
set -u
OUT=${OUT:-/tmp/cuda_checks}
BUNDLE=${BUNDLE:-.gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TF_CPP_MIN_LOG_LEVEL=2
PY=python3

stage() {  # stage NAME SECONDS COMMAND...: run it under a time limit, log to $OUT/NAME.log, print its tail
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" >>"$OUT/$name.log" 2>&1
    rc=$?
    echo "== $name: rc $rc in $(($(date +%s) - start)) s (limit $limit s)"
    tail -n "${TAIL:-12}" "$OUT/$name.log"
    return $rc
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    $PY -c "import jax, jaxlib, flax, torch, transformers, tokenizers, numpy; print('image:', *(f'{m.__name__} {m.__version__}' for m in (jax, jaxlib, flax, torch, transformers, tokenizers, numpy)))"
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

# carried wheels (gguf: the image lacks it); jax stays the image's (its CUDA plugin)
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$BUNDLE"/whl/*.whl >>"$OUT/env.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD

mkdir -p /tmp/models && tar xzf "$BUNDLE/models.tgz" -C /tmp
stage weights 50 $PY -m experiments.bench.random_weights weights /tmp/models

SHAPES=(--forward=1x128,16x512,64x512,8x2048 --generation=32x128x64 --repeats=3 --torch=off --dtype=bfloat16
        --batch_size=1)  # the load's fit check plans one row at the model's whole context (32k for two)
for model in smollm2-135m gemma3-270m qwen2.5-coder-1.5b; do
    stage throughput 75 $PY -m experiments.throughput --model=/tmp/models/$model "${SHAPES[@]}" \
        --output_dir=/tmp/throughput/$model
    cp /tmp/throughput/$model/results.json "$OUT/throughput-$model.json" 2>/dev/null
done

# the suite's model tests on the GPU: bf16 attention takes cuDNN there (tests/models/test_attention.py)
stage tests 110 env JAX_PLATFORMS=cuda XLA_FLAGS=--xla_gpu_autotune_level=0 $PY -m pytest -q -p no:cacheprovider \
    -o addopts="" --durations=5 -rfE --tb=short tests/models/test_attention.py tests/models/test_decode_cache.py \
    tests/models/test_gemma3.py tests/models/test_qwen2.py tests/models/test_llama.py

stage byod 90 $PY -m experiments.byod --model=/tmp/models/smollm2-135m --corpus="$BUNDLE/fortunes.jsonl" --benign= \
    --max_examples=1000 --dtype=bfloat16 --output_dir=/tmp/byod
echo "== done"
