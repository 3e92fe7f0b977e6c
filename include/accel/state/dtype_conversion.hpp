// What load_model() does with a weight whose dtype in the file is not the model's.
#pragma once

namespace accel {

enum class DtypeConversion {
  // Floating point into floating point, rounded as torch's copy_ rounds (an fp32 file into a
  // bf16 model, fp64 into fp32); refused, naming the tensor, when a finite value would become
  // infinite, and when the kind of number changes (bool or integers into a floating-point
  // parameter, or back): that is most often the wrong file.
  checked,
  // Every conversion torch's copy_ makes, overflow and kind changes included.
  unchecked,
};

}  // namespace accel
