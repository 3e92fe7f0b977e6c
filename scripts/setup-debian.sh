#!/usr/bin/env bash
# Installs everything accel needs from Debian 12 packages. Idempotent: packages already
# present are left alone, so running it twice costs one `dpkg -s`.
set -euo pipefail

packages=(
  cmake g++ make ninja-build
  libtorch-dev          # libtorch 1.13 (Debian 12) headers, libs and CMake config
  libgloo-dev           # Gloo: headers c10d's ProcessGroupGloo.hpp includes, and libgloo.so accel links
  libfmt-dev
  doctest-dev
  libboost1.81-dev      # Boost.PFR first ships in 1.75; Debian 12's default Boost is 1.74
  libopenblas0-pthread  # not the default reference BLAS: far slower (docs/getting-started.md)
  dataset-fashion-mnist
  fortunes              # the gpt example's default text: /usr/share/games/fortunes
  python3-torch         # PyTorch's own DDP: the reference the benchmarks compare against
  python3-protobuf      # tracking.tensorboard_reader reads accel's TensorBoard event files back with it
  time                  # GNU time (/usr/bin/time): bench/compile_cost.sh's wall time and peak RSS
  gnuplot-nox           # accel-plot draws the trackers' charts with it
  libpng-dev            # the accel-plot test decodes the charts it draws
  libyaml-cpp-dev       # accel-launch --config reads launch settings from YAML
  iproute2              # dist.two_nodes_netns, example.gpt.lose_node: network namespaces joined by a veth pair
  nlohmann-json3-dev    # JSON: safetensors headers, the weights' index file, checkpoint manifests
  libxxhash-dev         # xxHash, header-only (XXH_INLINE_ALL): checkpoint file checksums
  clang libclang-rt-14-dev  # clang++ and libFuzzer: tests/fuzz (fuzz.safetensors_short); host only
  doxygen               # the API reference from the public headers (ctest docs.api_reference)
  lld                   # links accel's own programs in a tenth of GNU ld's time (ACCEL_FAST_LINKER)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "accel setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "accel setup: run as root or install sudo" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

echo "accel setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
