// expect: accel: this parallelism policy's strategy is in a header the translation unit does not include: #include <accel/parallel/zero2.hpp> for Zero2, <accel/parallel/zero3.hpp> for Zero3
// expect: accel: this precision policy's behaviour is in a header the translation unit does not include: #include <accel/precision/bf16.hpp> for Bf16
// <accel/accelerator_class.hpp> has the default policies' behaviour only (Ddp, Fp32); an alias
// that names another policy without its header stops with one message per missing header. The
// twin includes them. Not on the shared precompiled header, which includes every policy's.
#include <accel/accelerator_class.hpp>
#ifdef ACCEL_TWIN
#include <accel/parallel/zero3.hpp>    // the fix
#include <accel/precision/bf16.hpp>  // the fix
#endif

int main() { accel::Accelerator<accel::Zero3, accel::Bf16> accelerator; }
