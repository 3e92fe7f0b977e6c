#!/usr/bin/env bash
# Ddp's buckets in shared memory with a /dev/shm too small for them (Docker's default is 64 MB):
# in a mount namespace of its own, /dev/shm is a 16 MiB tmpfs, which holds the transport's
# segment but not 2 x 16 MiB of buckets. prepare() must fail on rank 0 naming the size, /dev/shm
# and the option that keeps the buckets private, and the launch must end rather than hang.
# Skipped (77) where this process may not make a mount namespace.
#   small_dev_shm.sh LAUNCHER WORKER
set -uo pipefail
launcher=$1 worker=$2
# The namespace's /dev/shm made private before the tmpfs goes over it, rather than unshare
# changing the propagation of / (which fails in a chroot, whose / is no mount point): the tmpfs
# never reaches the namespace this test started in.
private='mount --make-private /dev/shm && mount -t tmpfs -o size=$size tmpfs /dev/shm'
if ! size=1m unshare -m --propagation unchanged sh -c "$private" 2>/dev/null; then
  echo "small_dev_shm.sh: skipped: this process may not mount a tmpfs in a namespace of its own"
  exit 77
fi
run="$private"' && exec "$0" --nproc 2 -- "$1" ddp_large_buckets'
output=$(size=16m unshare -m --propagation unchanged sh -c "$run" "$launcher" "$worker" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -eq 0 ]; then
  echo "small_dev_shm.sh: the launch succeeded in 16 MiB of /dev/shm" >&2
  exit 1
fi
for part in "could not place the gradient buckets" "bytes for each of the 2 ranks" "--shm-size" \
            "df -h /dev/shm" "buckets_in_shared_memory = false" "No space left on device"; do
  if ! grep -qF -- "$part" <<<"$output"; then
    echo "small_dev_shm.sh: the output does not say '$part'" >&2
    exit 1
  fi
done
echo "small_dev_shm.sh: refused as expected"
