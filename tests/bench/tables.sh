#!/usr/bin/env bash
# bench/tables.py's arithmetic on known raw lines: every ratio is the median of the per-turn
# ratios (both sides from the same turn) with their min-max, the rows a comparison has, and the
# turns that lack a side left out of its ratios.
#   tables.sh PYTHON TABLES_PY
set -euo pipefail
python=$1; tables=$2
raw=$(mktemp "${TMPDIR:-/tmp}/accel-tables.XXXXXX")
trap 'rm -f "$raw"' EXIT
fail() { echo "tables: $*" >&2; printf '%s\n' "$out" >&2; exit 1; }

# Turn 3's PyTorch run of FULL_SHARD is missing: zero3's ratios come from turns 1 and 2 only. The medians of
# throughputs are 100 (accel ddp), 100 (torch ddp); the per-turn ratios 1.2, 0.8 and 1.0.
cat >"$raw" <<'RAW'
turn=1 impl=accel strategy=ddp steps_per_s=1 tokens_per_s=120 rank_peak_rss_mb=800,790
turn=1 impl=torch strategy=ddp steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=1000,990
turn=1 impl=torch-defaults strategy=ddp steps_per_s=1 tokens_per_s=50 rank_peak_rss_mb=1100,1090
turn=1 impl=accel-glibc strategy=ddp steps_per_s=1 tokens_per_s=60 rank_peak_rss_mb=800,790
turn=2 impl=accel strategy=ddp steps_per_s=1 tokens_per_s=80 rank_peak_rss_mb=800,790
turn=2 impl=torch strategy=ddp steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=1000,990
turn=2 impl=torch-defaults strategy=ddp steps_per_s=1 tokens_per_s=40 rank_peak_rss_mb=1100,1090
turn=2 impl=accel-glibc strategy=ddp steps_per_s=1 tokens_per_s=40 rank_peak_rss_mb=800,790
turn=3 impl=accel strategy=ddp steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=800,790
turn=3 impl=torch strategy=ddp steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=1000,990
turn=3 impl=torch-defaults strategy=ddp steps_per_s=1 tokens_per_s=25 rank_peak_rss_mb=1100,1090
turn=3 impl=accel-glibc strategy=ddp steps_per_s=1 tokens_per_s=50 rank_peak_rss_mb=800,790
turn=1 impl=accel strategy=zero3 steps_per_s=1 tokens_per_s=150 rank_peak_rss_mb=600,600
turn=1 impl=torch strategy=fsdp-full steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=800,800
turn=2 impl=accel strategy=zero3 steps_per_s=1 tokens_per_s=130 rank_peak_rss_mb=600,600
turn=2 impl=torch strategy=fsdp-full steps_per_s=1 tokens_per_s=100 rank_peak_rss_mb=800,800
turn=3 impl=accel strategy=zero3 steps_per_s=1 tokens_per_s=200 rank_peak_rss_mb=600,600
RAW
out=$("$python" "$tables" gpt "$raw" --turns 3 --nodes="two nodes (test)")
row() { grep -F "| $1 | $2 | $3 |" <<<"$out" || fail "no row '$1 | $2 | $3'"; }
ddp=$(row Ddp DDP "accel / PyTorch at its best, equal heaps")
# tokens/s medians, rss medians, the ratio's median with its min-max, rank 0's RSS ratio.
grep -qF "| 100 | 800 / 790 | 100 | 1000 / 990 | 1.00 (0.80 to 1.20) |" <<<"$ddp" || fail "ddp row 1: $ddp"
grep -qF "| 0.80 (0.80 to 0.80) |" <<<"$ddp" || fail "ddp row 1's RSS ratio: $ddp"
defaults=$(row Ddp DDP "accel / PyTorch's defaults (ddp.py --reference defaults, glibc's default heap)")
# accel over PyTorch's defaults per turn: 2.4, 2.0, 4.0; PyTorch best over defaults: 2, 2.5, 4.
grep -qF "| 2.40 (2.00 to 4.00) | PyTorch at its best / its defaults: 2.50 (2.00 to 4.00) |" \
  <<<"$defaults" || fail "ddp row 2: $defaults"
glibc=$(row Ddp DDP "accel --no-heap-tuning / PyTorch's defaults (both glibc's default heap)")
# accel-glibc over defaults: 1.2, 1.0, 2.0; accel over accel-glibc: 2.0, 2.0, 2.0.
grep -qF "| 1.20 (1.00 to 2.00) | accel's heap tuning: accel / accel --no-heap-tuning: 2.00 (2.00 to 2.00) |" \
  <<<"$glibc" || fail "ddp row 3: $glibc"
zero3=$(row Zero3 "FSDP FULL_SHARD" "accel / PyTorch at its best, equal heaps")
grep -qF "| 1.40 (1.30 to 1.50) |" <<<"$zero3" || fail "zero3's ratio over the two turns with both sides: $zero3"
grep -qF -- "- ranks: two nodes (test)" <<<"$out" || fail "the ranks' placement is not printed"
# A comparison without its PyTorch rows prints only what it has.
grep -qF "| Zero3 | FSDP FULL_SHARD | accel / PyTorch's defaults" <<<"$out" && fail "zero3 printed a row without data"
echo "tables: ok"
