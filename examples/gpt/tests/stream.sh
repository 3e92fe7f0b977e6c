#!/usr/bin/env bash
# --stream DIR on a generated folder of 4 text files of 41 KB (3 training shards of 1290 windows
# of --seq 32, more than the example's shuffle buffer of 1024, so that a resume reopens a file
# mid-way; the last file is the validation split), in a temporary folder of its own:
#   stream.sh train GPT [ARGS...]    trains a few steps (ARGS: processes, model, steps), leaves the
#                                    folder as it was; a folder of 1 file and --text with --stream
#                                    are refused with status 2 before anything is created
#   stream.sh resume GPT [ARGS...]   5 steps + checkpoint + 5 resumed = 10 straight, the same
#                                    param_digest (tests/example/resume.sh)
set -euo pipefail
mode=$1 binary=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
expect=$here/../../../tests/example/expect-status.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # the runs' default folders are this test's own
mkdir corpus
for f in 0 1 2 3; do
  awk -v f="$f" 'BEGIN { for (i = 1; i <= 700; ++i)
    printf "file %d, line %03d: pack my box with five dozen liquor jugs.\n", f, i }' \
    > "corpus/part_$f.txt"
done
case $mode in
  train)
    before=$(ls -l --time-style=+%s.%N corpus | md5sum; cat corpus/* | md5sum)
    "$expect" 0 "text: 4 files in $work/corpus, streamed, 123900 training bytes \(3 files\)" \
      "$binary" --stream "$work/corpus" "$@"
    after=$(ls -l --time-style=+%s.%N corpus | md5sum; cat corpus/* | md5sum)
    [ "$before" = "$after" ] || { echo "stream.sh: the corpus folder changed" >&2; exit 1; }
    mkdir one && cp corpus/part_0.txt one/
    "$expect" 2 "^gpt: --stream $work/one holds 1 file \(part_0.txt\); it needs at least 2" \
      "$binary" --stream "$work/one" "$@"
    "$expect" 2 "^gpt: --text corpus and --stream corpus both name the text; give one of them" \
      "$binary" --text corpus --stream corpus "$@"
    [ ! -e runs ] && [ ! -e checkpoints ] || { echo "stream.sh: a refused run created files" >&2; exit 1; }
    echo "stream.sh: trained from the stream; refused what it cannot stream" ;;
  resume)
    "$here/../../../tests/example/resume.sh" "$binary" --stream "$work/corpus" "$@" ;;
  *) echo "stream.sh: mode '$mode'? (train or resume)" >&2; exit 2 ;;
esac
