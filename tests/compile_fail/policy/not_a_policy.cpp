// expect: accel: Accelerator's first parameter is not an accel policy
#include <accel/accelerator.hpp>

struct MyStrategy {};

int main() { accel::Accelerator<MyStrategy> accelerator; }
