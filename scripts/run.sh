#!/usr/bin/env bash
# Builds kestrel and generates text from the default model: ../shared/models/stories260K/stories260K.gguf
# when present, else a random-weight model the project writes itself. Extra arguments go to `generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "${KESTREL_JOBS:-2}" --target kestrel
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}
model="$shared/models/stories260K/stories260K.gguf"
if [ ! -f "$model" ]; then
  model=build/random-llama.gguf
  [ -f "$model" ] || ./build/kestrel make-model -o "$model" --type q8_0 --layers 4
fi
exec ./build/kestrel generate -m "$model" -p "Once upon a time" -n 128 "$@"
