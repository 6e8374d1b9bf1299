#!/usr/bin/env bash
# Installs what kestrel needs to build and test on Debian 12. Idempotent: safe to rerun.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git
  nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-14-dev  # libFuzzer target and its sanitizer runtimes
  curl python3              # the OpenAI-client test's server harness
  python3-jsonschema        # validates constrained output against its JSON Schema (tests)
  g++-aarch64-linux-gnu qemu-user  # the AArch64 build, tested under emulation (scripts/test_aarch64.sh)
  libopenmpi-dev openmpi-bin       # multi-process runs (src/dist, `mpirun ... kestrel`)
  libc6:arm64 libstdc++6:arm64 libpcre2-dev:arm64 libgtest-dev:arm64 libcpp-httplib-dev:arm64
)
# The arm64 libraries come from Debian multiarch.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO dpkg --add-architecture arm64
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Node.js runs the official openai client test (the openai 6.x package supports Node 18+).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
echo "setup: all build dependencies present"
