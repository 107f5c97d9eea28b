#!/bin/sh
# Builds what scripts/gpu-check.sh runs on a GPU machine that has no network and no
# package manager: build-gpu/bundle/ holds the tandem command, libtandem, the CUDA plugin,
# the CUDA unit test, examples/classify_folder (gpu-check.sh step 8) and (in lib/) every
# shared library they need that a bare Linux x86-64 machine may lack, except cuBLAS,
# cuBLASLt and cuDNN (over 700 MB: gpu-check.sh takes the machine's own, from its CUDA
# toolkit or PyTorch's wheels). The C library family stays behind (the machine's newer glibc
# runs these binaries).
#
#   scripts/build-gpu-bundle.sh [BUILD_DIR]     (default build-gpu; the bundle is BUILD_DIR/bundle)
#
# Carry it with the working tree as an archive: run(carry=["build-gpu/bundle.tar.xz",
# "build-gpu/node-tests.tar.xz"],
# command="scripts/gpu-check.sh"), which unpacks build-gpu/bundle.tar.xz when the folder is
# missing. The carry limit is 64 MiB for the tree and the carried paths together: the script
# prints the sizes and fails when the archive and the tracked tree pass 60 MiB.
set -eu
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
bundle="$build/bundle"
jobs="${JOBS:-2}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DTANDEM_CUDA_ARCHS=90 \
  -DTANDEM_OPENCL=OFF > /dev/null
cmake --build "$build" -j"$jobs" --target tandem_cli tandem_cuda test_cuda \
  test_segments classify_folder
rm -rf "$bundle"
mkdir -p "$bundle/lib"
cp "$build/tandem" "$build/libtandem_cuda.so" "$build/tests/test_cuda" \
  "$build/tests/test_segments" "$build/examples/classify_folder" "$bundle/"
cp -L "$build"/libtandem.so.0 "$bundle/"
strip --strip-unneeded "$bundle/tandem" "$bundle/libtandem.so.0" "$bundle/libtandem_cuda.so" \
  "$bundle/test_cuda" "$bundle/test_segments" "$bundle/classify_folder" 2> /dev/null || true
# shared libraries: everything ldd resolves outside the bundle, minus the C library family
# and the CUDA libraries the machine provides; cudart is small and pinned to the toolkit
# the plugin was built with, so it travels
for f in "$bundle/tandem" "$bundle/libtandem.so.0" "$bundle/libtandem_cuda.so" "$bundle/test_cuda" \
         "$bundle/test_segments" "$bundle/classify_folder"; do
  LD_LIBRARY_PATH="$bundle" ldd "$f"
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    libcublas.so.*|libcublasLt.so.*|libcudnn*.so.*|libcuda.so.*) continue ;;
    libtandem*) continue ;;
  esac
  cp -L "$path" "$bundle/lib/$name"
done
cat > "$bundle/README" << EOF
tandem GPU bundle, built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')
CUDA toolkit: $(nvcc --version 2>/dev/null | tail -1 || echo '?'); GPU code for sm_90
Run: scripts/gpu-check.sh (sets LD_LIBRARY_PATH to this folder, lib/ and the machine's cuBLAS/cuDNN)
EOF
# the carry limit is 64 MiB for the working tree and the carried paths together: the bundle
# travels as one xz archive (libdnnl alone is ~40 MB unpacked) that gpu-check.sh unpacks
tar -C "$build" -cJf "$bundle.tar.xz" bundle
# the ONNX node tests that tests/conformance_pass.txt pins, for a machine without the test data
# (gpu-check.sh step 3 unpacks it): ~1.2 MB
node=/usr/share/libonnx-testdata/data/node; repo="$(pwd)"
if [ -d "$node" ]; then
  (cd "$node" && while read -r t; do [ -d "$t" ] && echo "$t"; done < "$repo/tests/conformance_pass.txt") \
    > "$build/node-tests.txt"
  tar -C "$node" -cJf "$build/node-tests.tar.xz" -T "$build/node-tests.txt"
fi
size_kb=$(du -sk "$bundle" | cut -f1)
tar_kb=$(du -sk "$bundle.tar.xz" | cut -f1)
[ -f "$build/node-tests.tar.xz" ] && tar_kb=$((tar_kb + $(du -sk "$build/node-tests.tar.xz" | cut -f1)))
tree_kb=$(($(git ls-files -z | du -c --apparent-size -b --files0-from=- | tail -1 | cut -f1) / 1024))
echo "bundle: $bundle, $((size_kb / 1024)) MiB unpacked, $bundle.tar.xz $((tar_kb / 1024)) MiB:"
ls -la "$bundle" "$bundle/lib"
echo "carry: run(carry=[\"$bundle.tar.xz\", \"$build/node-tests.tar.xz\"], command=\"scripts/gpu-check.sh\"); the tracked tree is $((tree_kb / 1024)) MiB"
if [ $((tar_kb + tree_kb)) -gt $((60 * 1024)) ]; then
  echo "the archive and the tracked tree are over 60 MiB together: they will not travel" >&2
  exit 1
fi
