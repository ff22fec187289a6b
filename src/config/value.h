// Values as the config parser sees them before they are typed: a YAML node or a command-line
// string reduced to a RawValue, and the conversions from it to ints, numbers, bools, names and
// lists. A conversion that fails throws ValueError with the detail only ("expected a number, got
// 'abc'"); the loader adds the file, line and key. Also the formatting that to_yaml and --help use,
// and the edit distance behind "did you mean".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fsdp {
namespace config {

class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RawValue {
  enum class Kind { kNull, kScalar, kList, kMap };
  Kind kind = Kind::kNull;
  std::string text;                // kScalar
  std::vector<std::string> items;  // kList: its scalars
  size_t map_size = 0;             // kMap: number of entries (sections are walked, not typed)

  static RawValue scalar(std::string text) {
    RawValue v;
    v.kind = Kind::kScalar;
    v.text = std::move(text);
    return v;
  }
};

// Each throws ValueError unless `v` is a scalar of the right form.
int64_t to_int(const RawValue& v);  // "12", "-3"; "1e8" when integral
double to_number(const RawValue& v);
bool to_bool(const RawValue& v);         // true/false, yes/no, on/off (any case)
std::string to_text(const RawValue& v);  // a scalar; null is ""
// A list: a YAML sequence, a comma-separated scalar, or "[a, b]"; items trimmed, empties dropped.
std::vector<std::string> to_list(const RawValue& v);
// Index of `v` (case-insensitive) in `names`, else ValueError listing them.
size_t to_choice(const RawValue& v, const std::vector<std::string>& names);

// Case-insensitive equality, for names ("FSDP", "fsdp").
bool same_name(const std::string& a, const std::string& b);

// How a value reads in a message: 'abc', a list, a mapping, nothing.
std::string describe(const RawValue& v);

// Shortest text that parses back to exactly `x`.
std::string format_number(double x);
std::string format_list(const std::vector<std::string>& items);  // "a,b"
std::string join(const std::vector<std::string>& items, const std::string& separator);

// Levenshtein distance.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace config
}  // namespace fsdp
