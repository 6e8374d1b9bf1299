#!/usr/bin/env bash
# Builds kestrel and generates text from the default model: ../shared/models/stories260K/stories260K.gguf
# when present, else a random-weight model the project writes itself. Extra arguments go to `generate`
# after the defaults below, so the user's flags override them (-n 60 replaces -n 128).
# KESTREL_BIN=path/to/kestrel uses that binary instead of building one (the tests run this script so).
set -euo pipefail
cd "$(dirname "$0")/.."
kestrel=${KESTREL_BIN:-}
if [ -z "$kestrel" ]; then
  bash scripts/setup.sh >/dev/null
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "${KESTREL_JOBS:-2}" --target kestrel
  kestrel=./build/kestrel
fi
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}
model="$shared/models/stories260K/stories260K.gguf"
if [ ! -f "$model" ]; then
  model="$(dirname "$kestrel")/random-llama.gguf"
  [ -f "$model" ] || "$kestrel" make-model -o "$model" --type q8_0 --layers 4
fi
exec "$kestrel" generate -m "$model" -p "Once upon a time" -n 128 "$@"
