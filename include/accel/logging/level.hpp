// The logger's levels and LoggerOptions live in options/logging.hpp, beside the Options that
// hold them; this path stays for programs that include it.
#pragma once

#include "../options/logging.hpp"
