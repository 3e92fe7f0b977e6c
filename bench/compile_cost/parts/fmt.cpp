// compile_cost.sh --parts: {fmt}'s format.h as accel::accel builds it (libfmt; FMT_HEADER_ONLY with --fmt-header-only).
#include <torch/torch.h>
#include <fmt/format.h>
