// Values of the Jinja engine with Python's semantics: construction (with the nesting bookkeeping
// the caps use), truth, equality and order, str() and repr() as CPython writes them (floats by
// the shortest repr that reads back, strings quoted as repr quotes them), and json.dumps as
// transformers' tojson filter calls it (ensure_ascii=False, sort_keys=False).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "data/jinja_internal.h"
#include "data/utf8.h"

namespace fsdp::data::jinja {

Error::Error(const std::string& origin, int line, const std::string& message, bool raised)
    : std::runtime_error(origin + (line > 0 ? " line " + std::to_string(line) : "") + ": " +
                         message),
      message_(message),
      line_(line),
      raised_(raised) {}

Value Value::undefined(std::string hint) {
  Value v;
  v.text = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::real(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}
Value Value::list(std::vector<Value> items) { return make_list(std::move(items)); }
Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  std::vector<std::pair<Value, Value>> entries;
  entries.reserve(items.size());
  for (auto& [k, v] : items) entries.emplace_back(Value::string(k), std::move(v));
  return make_dict(std::move(entries));
}

int depth_of(const Value& v) {
  const bool container =
      v.kind == Kind::kList || v.kind == Kind::kDict || v.kind == Kind::kNamespace;
  return container ? v.obj->depth : 0;
}

namespace {

bool holds_namespace(const Value& v) {
  return v.kind == Kind::kNamespace || (v.obj && v.obj->holds_namespace);
}

void note_child(Object& o, const Value& child) {
  o.depth = std::max(o.depth, depth_of(child) + 1);
  o.holds_namespace = o.holds_namespace || holds_namespace(child);
}

}  // namespace

Value make_list(std::vector<Value> items, bool tuple) {
  auto o = std::make_shared<Object>();
  for (const Value& x : items) note_child(*o, x);
  o->items = std::move(items);
  o->tuple = tuple;
  Value v;
  v.kind = Kind::kList;
  v.obj = std::move(o);
  return v;
}

Value make_iterator(std::vector<Value> items, std::string type) {
  Value v = make_list(std::move(items));
  v.obj->lazy = true;
  v.obj->name = std::move(type);
  return v;
}

bool is_iterator(const Value& v) { return v.kind == Kind::kList && v.obj->lazy; }

Value make_dict(std::vector<std::pair<Value, Value>> entries) {
  auto o = std::make_shared<Object>();
  for (auto& [k, x] : entries) {
    note_child(*o, k);
    note_child(*o, x);
  }
  o->entries = std::move(entries);
  Value v;
  v.kind = Kind::kDict;
  v.obj = std::move(o);
  return v;
}

Value make_callable(std::string name, std::function<Value(Renderer&, Args&, int)> fn) {
  auto o = std::make_shared<Object>();
  o->name = std::move(name);
  o->call = std::move(fn);
  Value v;
  v.kind = Kind::kCallable;
  v.obj = std::move(o);
  return v;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0;
    case Kind::kString:
      return !v.text.empty();
    case Kind::kList:
      return v.obj->lazy || !v.obj->items.empty();
    case Kind::kDict:
      return !v.obj->entries.empty();
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return v.obj->lazy ? v.obj->name : v.obj->tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    default:
      return "function";
  }
}

namespace {

bool is_number(const Value& v) {
  return v.kind == Kind::kBool || v.kind == Kind::kInt || v.kind == Kind::kFloat;
}
bool is_integral(const Value& v) { return v.kind == Kind::kBool || v.kind == Kind::kInt; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }
double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : double(as_int(v)); }

constexpr int kMaxRecursion = 600;  // above 2 x Limits::max_value_depth: never reached by values

}  // namespace

bool py_equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxRecursion) return false;
  if (is_number(a) && is_number(b)) {
    if (is_integral(a) && is_integral(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.text == b.text;
    case Kind::kList: {
      if (a.obj->lazy || b.obj->lazy) return a.obj == b.obj;
      const auto &x = a.obj->items, &y = b.obj->items;
      if (x.size() != y.size() || a.obj->tuple != b.obj->tuple) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      const auto &x = a.obj->entries, &y = b.obj->entries;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = dict_find(*b.obj, k);
        if (!w || !py_equal(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.obj == b.obj;
  }
}

int py_compare(const Value& a, const Value& b, bool& ok, int depth) {
  ok = true;
  if (is_number(a) && is_number(b)) {
    if (is_integral(a) && is_integral(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y;
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) {
    const int c = a.text.compare(b.text);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.kind == Kind::kList && b.kind == Kind::kList && !a.obj->lazy && !b.obj->lazy &&
      depth < kMaxRecursion) {
    const auto &x = a.obj->items, &y = b.obj->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i], depth + 1)) continue;
      return py_compare(x[i], y[i], ok, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  ok = false;
  return 0;
}

const Value* dict_find(const Object& dict, const Value& key) {
  for (const auto& [k, v] : dict.entries)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // The shortest of %.{p}e that reads back to f: the digits CPython's repr writes.
  char buf[64];
  for (int p = 0; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s(buf);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) digits += s[i];
  const std::string sign = f < 0 ? "-" : "";
  if (exp < -4 || exp >= 16) {  // repr's scientific form: 1e+16, 1.5e-05
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + m + buf;
  }
  if (exp < 0) return sign + "0." + std::string(-exp - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exp + 1)
    return sign + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  return sign + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

namespace {

// repr() of a str: single quotes unless the text holds ' and no ".
std::string str_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return v.text;
    default:
      return py_repr(v);
  }
}

std::string py_repr(const Value& v, int depth) {
  if (depth > kMaxRecursion) return "...";
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return float_repr(v.f);
    case Kind::kString:
      return str_repr(v.text);
    case Kind::kList: {
      if (v.obj->lazy) return "<" + v.obj->name + " object>";
      const auto& xs = v.obj->items;
      std::string out = v.obj->tuple ? "(" : "[";
      for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + py_repr(xs[i], depth + 1);
      if (v.obj->tuple && xs.size() == 1) out += ",";
      return out + (v.obj->tuple ? ")" : "]");
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = v.kind == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.obj->entries) {
        out += (first ? "" : ", ") + py_repr(k, depth + 1) + ": " + py_repr(x, depth + 1);
        first = false;
      }
      return out + (v.kind == Kind::kNamespace ? "}>" : "}");
    }
    default:
      return "<function " + v.obj->name + ">";
  }
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A dict key as json.dumps writes it: strings, and numbers, booleans and None as their JSON text
// in quotes.
bool json_key(const Value& k, std::string& out) {
  switch (k.kind) {
    case Kind::kString:
      out = json_string(k.text);
      return true;
    case Kind::kNone:
      out = "\"null\"";
      return true;
    case Kind::kBool:
      out = k.b ? "\"true\"" : "\"false\"";
      return true;
    case Kind::kInt:
      out = "\"" + std::to_string(k.i) + "\"";
      return true;
    case Kind::kFloat:
      out = "\"" + float_repr(k.f) + "\"";
      return true;
    default:
      return false;
  }
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

}  // namespace

std::string to_json(const Value& v, int indent, bool& ok, int depth) {
  ok = true;
  if (depth > kMaxRecursion) return ok = false, "";
  const bool pretty = indent >= 0;
  const std::string nl = pretty ? "\n" + std::string(size_t(indent) * (depth + 1), ' ') : "";
  const std::string close = pretty ? "\n" + std::string(size_t(indent) * depth, ' ') : "";
  const std::string sep = pretty ? "," : ", ";
  switch (v.kind) {
    case Kind::kNone:
      return "null";
    case Kind::kBool:
      return v.b ? "true" : "false";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return json_float(v.f);
    case Kind::kString:
      return json_string(v.text);
    case Kind::kList: {
      if (v.obj->lazy) return ok = false, "";
      const auto& xs = v.obj->items;
      if (xs.empty()) return "[]";
      std::string out = "[";
      for (size_t i = 0; i < xs.size() && ok; ++i)
        out += (i ? sep : "") + nl + to_json(xs[i], indent, ok, depth + 1);
      return out + close + "]";
    }
    case Kind::kDict: {
      const auto& es = v.obj->entries;
      if (es.empty()) return "{}";
      std::string out = "{", key;
      bool first = true;
      for (const auto& [k, x] : es) {
        if (!ok || !json_key(k, key)) return ok = false, "";
        out += (first ? "" : sep) + nl + key + ": " + to_json(x, indent, ok, depth + 1);
        first = false;
      }
      return out + close + "}";
    }
    default:
      ok = false;
      return "";
  }
}

std::vector<size_t> char_offsets(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); i = decode_utf8(s, i).end) out.push_back(i);
  return out;
}

size_t char_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// str.isspace(): the characters Python's str.split() and str.strip() treat as whitespace.
bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace fsdp::data::jinja
