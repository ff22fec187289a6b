// Conversions from untyped config values, strict enough that a typo is an error rather than a
// zero: a number must be consumed whole, an int must be integral, a bool must be a YAML word.
#include "config/value.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace fsdp {
namespace config {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// strtod also reads hexadecimal ("0x1p3"), which no config means.
bool hexadecimal(const std::string& t) { return t.find_first_of("xX") != std::string::npos; }

const std::string& scalar_text(const RawValue& v, const char* expected) {
  if (v.kind != RawValue::Kind::kScalar) {
    throw ValueError(std::string("expected ") + expected + ", got " + describe(v));
  }
  return v.text;
}

}  // namespace

bool same_name(const std::string& a, const std::string& b) { return lower(a) == lower(b); }

std::string describe(const RawValue& v) {
  switch (v.kind) {
    case RawValue::Kind::kNull:
      return "nothing";
    case RawValue::Kind::kScalar:
      return "'" + v.text + "'";
    case RawValue::Kind::kList:
      return "a list";
    case RawValue::Kind::kMap:
      return "a mapping";
  }
  return "?";
}

double to_number(const RawValue& v) {
  const std::string& text = scalar_text(v, "a number");
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || hexadecimal(t)) {
    throw ValueError("expected a number, got '" + text + "'");
  }
  return x;
}

int64_t to_int(const RawValue& v) {
  const std::string& text = scalar_text(v, "an integer");
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(t.c_str(), &end, 10);
  if (!t.empty() && *end == '\0' && errno == 0) return i;
  if (!t.empty() && *end == '\0' && errno == ERANGE) {  // digits alone, too many of them
    throw ValueError("'" + text + "' is out of range (at most " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  }
  // Scientific notation ("1e8", common for fsdp_min_num_params) when it names an integer exactly.
  errno = 0;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || errno == ERANGE || hexadecimal(t) || x != std::floor(x) ||
      std::fabs(x) > 9e15) {
    throw ValueError("expected an integer, got '" + text + "'");
  }
  return static_cast<int64_t>(x);
}

bool to_bool(const RawValue& v) {
  const std::string& text = scalar_text(v, "true or false");
  const std::string t = lower(trim(text));
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  throw ValueError("expected true or false, got '" + text + "'");
}

std::string to_text(const RawValue& v) {
  if (v.kind == RawValue::Kind::kNull) return "";
  return scalar_text(v, "a string");
}

std::vector<std::string> to_list(const RawValue& v) {
  std::vector<std::string> raw;
  if (v.kind == RawValue::Kind::kList) {
    raw = v.items;
  } else if (v.kind == RawValue::Kind::kScalar) {
    std::string t = trim(v.text);
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
    std::istringstream parts(t);
    for (std::string item; std::getline(parts, item, ',');) raw.push_back(item);
  } else if (v.kind == RawValue::Kind::kMap) {
    throw ValueError("expected a list or a comma-separated string, got a mapping");
  }
  std::vector<std::string> out;
  for (const auto& item : raw) {
    std::string t = trim(item);
    if (!t.empty()) out.push_back(t);
  }
  return out;
}

size_t to_choice(const RawValue& v, const std::vector<std::string>& names) {
  const std::string& text = scalar_text(v, ("one of " + join(names, ", ")).c_str());
  const std::string t = lower(trim(text));
  for (size_t i = 0; i < names.size(); ++i) {
    if (t == lower(names[i])) return i;
  }
  throw ValueError("expected one of " + join(names, ", ") + ", got '" + text + "'");
}

std::string format_number(double x) {
  // Whole numbers in full ("10000", not "1e+04"); the rest in the fewest digits that read back.
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream out;
    out.precision(precision);
    out << x;
    if (std::strtod(out.str().c_str(), nullptr) == x) return out.str();
  }
  std::ostringstream out;
  out.precision(17);
  out << x;
  return out.str();
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string format_list(const std::vector<std::string>& items) { return join(items, ","); }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace config
}  // namespace fsdp
