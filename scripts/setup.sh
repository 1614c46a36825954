#!/usr/bin/env bash
# Brings a checkout to a built tree for one CMake preset: usage `scripts/setup.sh [preset]`.
#
#  1. The Debian packages kiln builds and tests with: one dpkg-query pass; as root the missing ones
#     are installed, otherwise the exact apt-get line is printed and the script fails.
#  2. With a CUDA toolkit: cuDNN's header-only frontend (PyPI's nvidia-cudnn-frontend wheel, its
#     include/ only) in build/deps, where CMake looks for it (KILN_CUDNN; CMakeLists.txt). Once.
#  3. `cmake --preset P` only when build/P/build.ninja is absent (ninja re-runs CMake by itself
#     when a CMakeLists.txt changes, so configuring again is never needed for that).
#  4. `cmake --build --preset P`, which ninja makes incremental: a second run takes seconds.
#
# Everything goes to stderr, so that a caller's stdout (`scripts/bench --json`) stays clean.
set -euo pipefail
exec 1>&2

preset=${1:-release}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(cmake ninja-build g++ pkg-config libhwy-dev libtbb-dev libopenblas-dev libsqlite3-dev
          libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev googletest libbenchmark-dev
          python3-numpy python3-sklearn python3-pip zlib1g-dev)
# The clang preset builds with clang++-14, the clang Debian 12 ships.
if [[ $preset == clang ]]; then
  packages+=(clang-14)
fi

if ! command -v dpkg-query >/dev/null; then
  echo "setup: dpkg-query not found; this script knows Debian's package names only." \
       "Install the equivalents of: ${packages[*]}" >&2
  exit 1
fi

# dpkg-query prints a line for every package it knows (installed or not) and complains on stderr
# about the ones it has never heard of; only "install ok installed" counts as present.
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  grep -Fxq "$p install ok installed" <<<"$installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "setup: missing Debian packages; install them with:"
    echo "sudo apt-get install ${missing[*]}"
    exit 1
  fi
fi

cd "$root"
frontend_version=1.32.0  # KILN_CUDNN_FRONTEND_VERSION in CMakeLists.txt
frontend=build/deps/cudnn-frontend-$frontend_version
if { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; } &&
   [[ ! -f $frontend/include/cudnn_frontend.h ]]; then
  echo "setup: fetching cuDNN's frontend headers (nvidia-cudnn-frontend $frontend_version, PyPI)"
  wheels=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
    "nvidia-cudnn-frontend==$frontend_version"
  # A wheel is a zip; its include/ is the whole C++ frontend (header-only).
  python3 - "$wheels" "$frontend" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
  rm -rf "$wheels"
fi
if [[ ! -f build/$preset/build.ninja ]]; then
  cmake --preset "$preset"
fi
cmake --build --preset "$preset"
