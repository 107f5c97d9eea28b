#!/bin/sh
# Installs what tandem needs on Debian 12 (run as root). Idempotent: only missing packages.
set -e
PKGS="build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler libonnx-dev
libonnx-testdata libdnnl-dev libcmocka-dev libjansson-dev libmicrohttpd-dev
ocl-icd-opencl-dev pocl-opencl-icd zlib1g-dev python3 python3-venv clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
fi
