// FSDP_CHECK: the runtime's one way to refuse. Messages name what the user can act on (rank,
// unit, parameter, values); the exception type is std::runtime_error so callers need not know
// torch's c10::Error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "fsdp/comm.h"

namespace fsdp {
namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail
}  // namespace fsdp

// A failed check is an error this rank's peers may not see: note_local_error (fsdp/comm.h).
#define FSDP_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ::fsdp::note_local_error();                                              \
      throw std::runtime_error(::fsdp::detail::concat("fsdp: ", __VA_ARGS__)); \
    }                                                                          \
  } while (0)
