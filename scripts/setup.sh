#!/usr/bin/env bash
# Installs what kestrel needs to build and test on Debian 12. Idempotent: safe to rerun.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git
  nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-14-dev  # libFuzzer target and its sanitizer runtimes
)
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
echo "setup: all build dependencies present"
