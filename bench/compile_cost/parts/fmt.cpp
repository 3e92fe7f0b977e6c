// compile_cost.sh --parts: {fmt} in header-only mode (FMT_HEADER_ONLY, as accel::accel builds it).
#include <torch/torch.h>
#include <fmt/format.h>
