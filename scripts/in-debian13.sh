#!/usr/bin/env bash
# Runs a command inside the Debian 13 root made by scripts/debian13-root.sh, with the repo
# mounted at /src and the command started in /src.
#
#   scripts/in-debian13.sh [--root DIR] [-e NAME=VALUE]... -- CMD [ARG...]
#
#   scripts/in-debian13.sh -- cmake -S . -B build/deb13 -G Ninja
#   scripts/in-debian13.sh -- 'cmake --build build/deb13 && ctest --test-dir build/deb13'
#
# One word after -- is run as a shell snippet (so && and pipes work); several words are
# quoted one by one and run as a single command. Inside, the environment is clean
# (env -i: HOME, PATH, LANG, TERM and the -e variables only). /proc, /dev, /dev/pts,
# /dev/shm, /sys and the repo (at /src) are mounted in a private mount namespace
# (unshare -m), so they vanish when the command ends, however it ends; where unshare is
# unavailable the mounts are made in the host namespace and a trap undoes them.
# Exits with the command's exit status.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$REPO/.cache/debian13-root"
envs=()

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --root) [ $# -ge 2 ] || usage; ROOT="$2"; shift 2 ;;
    --root=*) ROOT="${1#--root=}"; shift ;;
    -e) if [ $# -lt 2 ] || [[ "$2" != [A-Za-z_]*=* ]]; then usage; fi
        envs+=("$2"); shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) usage ;;
  esac
done
[ $# -gt 0 ] || usage

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "in-debian13: run as root or install sudo" >&2; exit 1; }
  again=(--root "$ROOT")
  for e in "${envs[@]}"; do again+=(-e "$e"); done
  exec sudo -E bash "$0" "${again[@]}" -- "$@"
fi

ROOT="$(cd "$ROOT" 2>/dev/null && pwd)" \
  || { echo "in-debian13: no root at $ROOT; run scripts/debian13-root.sh first" >&2; exit 1; }
[ -x "$ROOT/usr/bin/bash" ] || { echo "in-debian13: $ROOT is not a Debian root" >&2; exit 1; }

if [ $# -eq 1 ]; then
  cmd="$1"
else
  cmd="$(printf '%q ' "$@")"
fi

# The part that mounts, chroots and runs; $1 = root, $2 = repo, $3 = command, rest = env.
# shellcheck disable=SC2016
inner='
set -euo pipefail
root="$1" repo="$2" cmd="$3"; shift 3
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
  done
}
child=
trap cleanup EXIT
# A signal to this shell is passed on to the command, and the mounts are undone after it.
forward() { [ -z "$child" ] || kill "-$1" "$child" 2>/dev/null || true; }
trap "forward INT" INT
trap "forward TERM" TERM
trap "forward HUP" HUP
mnt() {  # mnt TARGET MOUNT-ARGS...
  local target="$root$1"; shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}
mnt /proc -t proc proc
mnt /dev --bind /dev
mnt /dev/pts --bind /dev/pts
mnt /dev/shm --bind /dev/shm
mnt /sys --bind /sys
mnt /src --bind "$repo"
# env --default-signal: a background job of a non-interactive shell starts with SIGINT and
# SIGQUIT ignored; give the command back their defaults so Ctrl-C and forward() work.
chroot "$root" /usr/bin/env -i --default-signal=INT,QUIT HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  "$@" /bin/bash -lc "cd /src && $cmd" 0<&0 &
child=$!
# wait returns early (status > 128) when a trapped signal arrives; wait again until the
# command itself has ended, then exit with its status.
status=0
while :; do
  wait "$child" && status=0 || status=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$status"
'

if unshare -m --propagation private true 2>/dev/null; then
  # Private namespace: nothing mounted here is visible outside, and all of it goes away
  # with the namespace even on SIGKILL; the trap in $inner still unmounts on a clean exit.
  exec unshare -m --propagation private bash -c "$inner" in-debian13 \
    "$ROOT" "$REPO" "$cmd" "${envs[@]}"
else
  exec bash -c "$inner" in-debian13 "$ROOT" "$REPO" "$cmd" "${envs[@]}"
fi
