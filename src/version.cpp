// spindle::version() (see spindle/version.hpp).
#include "spindle/version.hpp"

namespace spindle {

char const* version() noexcept {
  return SPINDLE_VERSION_STRING;
}

}  // namespace spindle
