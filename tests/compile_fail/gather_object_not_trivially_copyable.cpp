// expect: accel: gather_object takes a trivially copyable type, std::string or a std::vector of a trivially copyable type
#include <accel/accelerator.hpp>

#include <string>
#include <vector>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
#ifdef ACCEL_TWIN
  accelerator.gather_object(std::string("a,b"));  // the fix: serialize to one string
#else
  accelerator.gather_object(std::vector<std::string>{"a", "b"});
#endif
}
