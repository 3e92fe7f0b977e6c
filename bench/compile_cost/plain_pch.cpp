// plain.cpp compiled over a precompiled header (bench/compile_cost.sh --pch): torch.
#include "plain.cpp"
