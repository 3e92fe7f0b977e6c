#!/usr/bin/env bash
# One case of the example's data checks, run in a temporary folder of its own:
#   data-dir.sh CASE FASHION_MNIST
# A --data-dir is only read: each bad folder must stop the example with status 2 and a message
# naming the file and what is wrong, before training and without creating anything. The cache
# folder (no --data-dir) is the example's own: a damaged file there is unpacked again.
set -euo pipefail
case_name=$1 binary=$2
here=$(cd "$(dirname "$0")" && pwd)
packaged=/usr/share/datasets/fashion-mnist
files="train-images-idx3-ubyte train-labels-idx1-ubyte
       t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
export XDG_CACHE_HOME=$work/cache  # whatever happens, never the user's own cache

# IDX numbers: 32-bit big-endian.
be32() {
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) \
    $(($1 >> 8 & 255)) $(($1 & 255)))"
}
# An images file: magic, count, rows, columns, then BYTES bytes of pixels.
images() { { be32 "$1"; be32 "$2"; be32 "$3"; be32 "$4"; head -c "$5" /dev/zero; }; }
unpack_into() { for f in $files; do gzip -dc "$packaged/$f.gz" >"$1/$f"; done; }

expect() { "$here/expect-status.sh" "$@"; }
# Fails when running the example changed anything in folder $1.
unchanged() {
  local folder=$1 before
  before=$(ls -lA "$folder")
  shift
  "$@"
  if [ "$(ls -lA "$folder")" != "$before" ]; then
    echo "data-dir: the example wrote into $folder" >&2; exit 1
  fi
}
train=(--steps 1 --eval-samples 10)
data=$work/data
mkdir "$data"

case $case_name in
  missing)
    expect 2 "--data-dir $work/absent/fashion-mnist does not exist" \
      "$binary" "${train[@]}" --data-dir "$work/absent/fashion-mnist"
    if [ -e "$work/absent" ]; then echo "data-dir: the example created $work/absent" >&2; exit 1; fi
    if [ -e "$work/cache" ]; then echo "data-dir: the example filled the cache" >&2; exit 1; fi ;;
  truncated)
    images 2051 60000 28 28 1000 >"$data/train-images-idx3-ubyte"
    unchanged "$data" expect 2 \
      "$data/train-images-idx3-ubyte is 1016 bytes, not the 47040016 its header gives .*truncated" \
      "$binary" "${train[@]}" --data-dir "$data" ;;
  gzipped)  # the packaged .gz copied under the unpacked name: a wrong magic number
    head -c 1000 /dev/zero | gzip >"$data/train-images-idx3-ubyte"
    unchanged "$data" expect 2 \
      "$data/train-images-idx3-ubyte has magic number [0-9]+, not 2051 .*gzipped" \
      "$binary" "${train[@]}" --data-dir "$data" ;;
  wrong_magic)
    images 2049 60000 28 28 47040000 >"$data/train-images-idx3-ubyte"
    unchanged "$data" expect 2 "$data/train-images-idx3-ubyte has magic number 2049, not 2051" \
      "$binary" "${train[@]}" --data-dir "$data" ;;
  wrong_count)
    images 2051 59999 28 28 $((59999 * 784)) >"$data/train-images-idx3-ubyte"
    unchanged "$data" expect 2 "$data/train-images-idx3-ubyte holds 59999 items, not 60000" \
      "$binary" "${train[@]}" --data-dir "$data" ;;
  wrong_dims)
    images 2051 60000 32 32 $((60000 * 1024)) >"$data/train-images-idx3-ubyte"
    unchanged "$data" expect 2 "$data/train-images-idx3-ubyte holds 32x32 images, not 28x28" \
      "$binary" "${train[@]}" --data-dir "$data" ;;
  read_only)  # a good folder trains, and is read only
    unpack_into "$data"
    chmod a-w "$data" "$data"/*
    unchanged "$data" expect 0 "test_accuracy=" "$binary" "${train[@]}" --data-dir "$data"
    if [ -e "$work/cache" ]; then echo "data-dir: the example filled the cache" >&2; exit 1; fi ;;
  cache_repaired)
    cache=$XDG_CACHE_HOME/accel/fashion-mnist
    mkdir -p "$cache"
    unpack_into "$cache"
    truncate -s 1000000 "$cache/train-images-idx3-ubyte"
    expect 0 "train-images-idx3-ubyte is 1000000 bytes.*unpacking it again" \
      "$binary" "${train[@]}"
    size=$(stat -c %s "$cache/train-images-idx3-ubyte")
    if [ "$size" -ne 47040016 ]; then
      echo "data-dir: the cached file is $size bytes, not 47040016" >&2; exit 1
    fi ;;
  *) echo "data-dir: no case $case_name" >&2; exit 2 ;;
esac
