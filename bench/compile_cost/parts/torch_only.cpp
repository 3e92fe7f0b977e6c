// compile_cost.sh --parts: <torch/torch.h> alone, the floor every other part is measured from.
#include <torch/torch.h>
