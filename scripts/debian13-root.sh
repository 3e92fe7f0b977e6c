#!/usr/bin/env bash
# Builds (or reuses) a Debian 13 (trixie) root folder holding libtorch 2.6 and the rest of
# accel's build dependencies, so accel can also be built and tested against Debian 13's
# libtorch through scripts/in-debian13.sh.
#
#   scripts/debian13-root.sh [ROOT_DIR]      (default: $REPO/.cache/debian13-root)
#
# - installs debootstrap on the host when it is missing (as root, or through sudo);
# - debootstraps trixie (--variant=minbase) from the same Debian mirror the host's apt uses
#   (override with DEBIAN13_MIRROR=http://...), then apt-get installs the packages below;
# - reuses an existing root that already holds every package: a second run takes seconds;
# - builds into ROOT_DIR.tmp and renames it to ROOT_DIR only when complete, so an interrupted
#   run never leaves a half-built ROOT_DIR; the next run resumes ROOT_DIR.tmp where it can.
# All chroot work runs in a private mount namespace (unshare -m), so no mount can leak.
# shellcheck disable=SC2016  # single-quoted $vars are meant for the inner shell or dpkg-query
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="${1:-$REPO/.cache/debian13-root}"
SUITE=trixie

packages=(
  libtorch-dev          # libtorch 2.6 headers, libs and CMake config
  libgloo-dev           # Gloo: headers c10d's ProcessGroupGloo.hpp includes, and libgloo.so accel links
  libfmt-dev
  doctest-dev
  libboost-dev          # Boost 1.83 in trixie (has Boost.PFR)
  libopenblas0-pthread  # not the default reference BLAS: far slower (docs/getting-started.md)
  dataset-fashion-mnist # the example's data, which the example's tests train on
  fortunes              # the GPT example's default text, which its tests train on
  gnuplot-nox           # accel-plot draws the trackers' charts with it
  libpng-dev            # the accel-plot test decodes the charts it draws
  libyaml-cpp-dev       # accel-launch --config reads launch settings from YAML
  iproute2              # dist.two_nodes_netns, example.gpt.lose_node: network namespaces joined by a veth pair
  nlohmann-json3-dev    # JSON: safetensors headers, the weights' index file, checkpoint manifests
  libxxhash-dev         # xxHash, header-only (XXH_INLINE_ALL): checkpoint file checksums
  doxygen               # the API reference from the public headers (ctest docs.api_reference)
  lld                   # links accel's own programs in a tenth of GNU ld's time (ACCEL_FAST_LINKER)
  time                  # GNU time (/usr/bin/time): example.gpt.text_memory reads the peak RSS
  python3 python3-protobuf  # tracking.tensorboard_reader reads accel's TensorBoard event files back
  cmake g++ make ninja-build
)

log() { echo "debian13-root: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Re-run as root when needed (debootstrap, chroot and mounts need it).
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "run as root or install sudo"
  exec sudo -E bash "$0" "$@"
fi

mkdir -p "$(dirname "$ROOT")"
ROOT="$(cd "$(dirname "$ROOT")" && pwd)/$(basename "$ROOT")"
TMP="$ROOT.tmp"
MARKER=.accel-debian13-packages     # at the root's top: the package set it was built with
BASE_DONE=.accel-debootstrap-done   # in ROOT.tmp: debootstrap finished, apt-get may resume
wanted="$(printf '%s\n' "${packages[@]}" | sort -u)"

# One run at a time per root.
exec 9>"$ROOT.lock"
flock 9 || die "cannot lock $ROOT.lock"

# Prints the packages from the list that are not installed in root $1.
missing_in() {
  local root="$1" p status
  for p in "${packages[@]}"; do
    status="$(chroot "$root" /usr/bin/dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
    [ "$status" = "install ok installed" ] || echo "$p"
  done
}

# Refuses to go on when something is still mounted under $1 (never rm -rf through a mount).
assert_unmounted() {
  if findmnt -rn -o TARGET | grep -qE "^$1(/|$)"; then
    die "something is still mounted under $1; unmount it first"
  fi
}

# --- Fast path: an existing, complete root. ---
if [ -d "$ROOT" ] && [ -f "$ROOT/$MARKER" ] && [ "$(cat "$ROOT/$MARKER")" = "$wanted" ] \
   && [ -z "$(missing_in "$ROOT")" ]; then
  log "reusing $ROOT (all ${#packages[@]} packages installed)"
  exit 0
fi

# --- Host tools. ---
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap on the host"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi
command -v unshare >/dev/null || die "unshare (util-linux) is missing"

# The Debian mirror the host's apt uses (first http(s) URI serving the main archive).
host_mirror() {
  local uri
  uri="$( { grep -hsE '^[[:space:]]*URIs:' /etc/apt/sources.list.d/*.sources \
              | sed -E 's/^[[:space:]]*URIs:[[:space:]]*//' | tr ' ' '\n'
            grep -hsE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
              | sed -E 's/\[[^]]*\]//' | awk '{print $2}'
          } | grep -E '^https?://' | grep -vE 'security|-updates|backports' \
            | grep -E '/debian/?$' | head -n1 || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR="${DEBIAN13_MIRROR:-$(host_mirror)}"
MIRROR="${MIRROR%/}"
SECURITY="${MIRROR%/debian}/debian-security"

# Runs a command chrooted into $1 with /proc, /dev, /dev/pts and /sys mounted, in a private
# mount namespace: the mounts vanish with the command, however it ends.
in_root() {
  local root="$1"; shift
  unshare -m --propagation private bash -euo pipefail -c '
    root="$1"; shift
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount --bind /dev/pts "$root/dev/pts"
    mount --bind /sys "$root/sys"
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      DEBIAN_FRONTEND=noninteractive "$@"
  ' in_root "$root" "$@"
}

# --- Stage 1: debootstrap into ROOT.tmp (skipped when an interrupted run got past it). ---
if [ -d "$TMP" ] && [ ! -f "$TMP/$BASE_DONE" ]; then
  log "removing incomplete $TMP"
  assert_unmounted "$TMP"
  rm -rf --one-file-system "$TMP"
fi
if [ ! -d "$TMP" ]; then
  # An existing ROOT whose package set changed is updated in place (stage 2 only).
  if [ -d "$ROOT" ] && [ -x "$ROOT/usr/bin/apt-get" ]; then
    log "updating existing $ROOT"
    TMP="$ROOT"
  else
    log "debootstrap $SUITE from $MIRROR into $TMP"
    assert_unmounted "$TMP.debootstrap"
    rm -rf --one-file-system "$TMP.debootstrap"
    # debootstrap in its own mount namespace too: its own /proc etc. mounts cannot leak.
    unshare -m --propagation private \
      debootstrap --variant=minbase --merged-usr "$SUITE" "$TMP.debootstrap" "$MIRROR" \
      || { log "debootstrap failed; see $TMP.debootstrap/debootstrap/debootstrap.log"; exit 1; }
    mv "$TMP.debootstrap" "$TMP"
    cat >"$TMP/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
    # Keep the root small and apt quiet; never start services inside it.
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
      >"$TMP/etc/apt/apt.conf.d/90accel-no-recommends"
    # A root to build in, remade rather than repaired: dpkg need not fsync every file it
    # unpacks (minutes saved on the ~400 packages).
    echo force-unsafe-io >"$TMP/etc/dpkg/dpkg.cfg.d/90accel-unsafe-io"
    printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
    chmod +x "$TMP/usr/sbin/policy-rc.d"
    touch "$TMP/$BASE_DONE"
  fi
else
  log "resuming $TMP"
fi
cp -L /etc/resolv.conf "$TMP/etc/resolv.conf" 2>/dev/null || true

# --- Stage 2: the packages, with apt inside the root (resolves alternatives and virtuals). ---
mapfile -t need < <(missing_in "$TMP")
if [ ${#need[@]} -gt 0 ]; then
  log "installing in the root: ${need[*]}"
  in_root "$TMP" bash -euo pipefail -c '
    dpkg --configure -a       # finish what an interrupted run left unpacked
    apt-get update -qq
    apt-get -f install -y -qq -o Dpkg::Use-Pty=0 >/dev/null
    apt-get install -y -qq -o Dpkg::Use-Pty=0 "$@" >/dev/null
    apt-get clean
  ' install "${need[@]}"
fi
mapfile -t still < <(missing_in "$TMP")
[ ${#still[@]} -eq 0 ] || die "not installed in $TMP: ${still[*]}"
echo "$wanted" >"$TMP/$MARKER"

# --- Publish. ---
if [ "$TMP" != "$ROOT" ]; then
  if [ -e "$ROOT" ]; then
    log "replacing stale $ROOT"
    assert_unmounted "$ROOT"
    rm -rf --one-file-system "$ROOT"
  fi
  mv "$TMP" "$ROOT"
fi
log "ready: $ROOT ($(chroot "$ROOT" dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null \
  | sed 's/^/libtorch-dev /'))"
