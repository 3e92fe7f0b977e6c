// Accelerator::memory_use()'s MemoryUse and the MemoryCounter behind it live in
// detail/memory_counter.hpp, below the strategies that count into it; this path stays for
// programs that include it.
#pragma once

#include "../detail/memory_counter.hpp"
