// expect: accel: save_state, load_state, save_model and load_model need #include <accel/checkpoints.hpp>
#include <accel/accelerator.hpp>
#ifdef ACCEL_TWIN
#include <accel/checkpoints.hpp>  // the fix
#endif

// <accel/accelerator.hpp> leaves checkpoints out (compile time); calling save_state() without
// their header names it. The twin includes it.
int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.save_state("checkpoint");
}
