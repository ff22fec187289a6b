// The one parser of numbers given on a command line, shared by every tool (fsdp-run, fsdp-ckpt,
// fsdp-train's sample flags, the benchmarks and the demo): the whole text must be the number
// ("3abc" is an error, not 3), and it must lie in the flag's range (99999999999 is an error, not a
// wrapped int). Errors name the flag. Header-only and free of LibTorch, so that fsdp-run, which
// links no LibTorch, uses it too.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fsdp {
namespace flags {

// A bad number: what() is "FLAG: DETAIL"; tools turn it into their usage error.
class NumberError : public std::invalid_argument {
 public:
  NumberError(const std::string& flag, const std::string& detail)
      : std::invalid_argument(flag + ": " + detail), flag_(flag), detail_(detail) {}
  const std::string& flag() const { return flag_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string flag_, detail_;
};

inline std::string range_text(double lo, double hi) {
  std::ostringstream s;
  s << "[" << lo << ", " << hi << "]";
  return s.str();
}

// A decimal integer in [lo, hi], spelled with nothing before or after it.
inline int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  const bool digits_only =
      !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) ||
                        ((text[0] == '-' || text[0] == '+') && text.size() > 1));
  if (!digits_only || *end != '\0') throw NumberError(flag, "'" + text + "' is not an integer");
  if (errno == ERANGE || v < lo || v > hi) {
    throw NumberError(
        flag, text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

// A finite decimal number in [lo, hi] (no hexadecimal, no "inf" or "nan").
inline double parse_number(const std::string& flag, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || text.find_first_of("xXnN") != std::string::npos ||
      std::isspace(static_cast<unsigned char>(text[0]))) {
    throw NumberError(flag, "'" + text + "' is not a number");
  }
  if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) {
    throw NumberError(flag, text + " is out of range " + range_text(lo, hi));
  }
  return v;
}

}  // namespace flags
}  // namespace fsdp
