// The Jinja subset's built-ins: jinja2's filters and tests that chat templates use, the methods
// of Python's str, dict and list they call (the non-mutating ones: the immutable sandbox refuses
// the others), and the globals transformers adds (raise_exception, strftime_now) beside jinja2's
// (range, namespace, dict). Each follows its Python definition; where Python's result depends on
// Unicode, utf8proc's simple case mappings stand for str.upper() and str.lower().
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "data/jinja_internal.h"
#include "data/utf8.h"

namespace fsdp::data::jinja {
namespace {

// ---- arguments ----

// Argument `k` by position or by `name`; `dflt` when absent.
Value arg(const Args& a, size_t k, const char* name, Value dflt = Value::undefined()) {
  if (k < a.pos.size()) return a.pos[k];
  for (const auto& [n, v] : a.kw)
    if (n == name) return v;
  return dflt;
}

std::string need_str(Renderer& r, const Value& v, const char* what, int line) {
  if (v.kind != Kind::kString)
    fail(r, line, std::string(what) + " needs a string, not " + type_name(v));
  return v.text;
}

int64_t need_int(Renderer& r, const Value& v, const char* what, int line) {
  if (v.kind == Kind::kBool) return v.b;
  if (v.kind != Kind::kInt)
    fail(r, line, std::string(what) + " needs an integer, not " + type_name(v));
  return v.i;
}

Value str_value(Renderer& r, std::string s, int line) {
  check_size(r, s.size(), line);
  return Value::string(std::move(s));
}

// ---- text ----

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    cps.push_back(c.cp < 0 ? 0xFFFD : uint32_t(c.cp));
    i = c.end;
  }
  return cps;
}

std::string encode(const std::vector<uint32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string s;
  for (size_t i = from; i < cps.size() && i < to; ++i) append_utf8(s, cps[i]);
  return s;
}

uint32_t upper(uint32_t c) { return uint32_t(utf8proc_toupper(utf8proc_int32_t(c))); }
uint32_t lower(uint32_t c) { return uint32_t(utf8proc_tolower(utf8proc_int32_t(c))); }
bool is_alpha(uint32_t c) {
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

std::string map_case(const std::string& s, uint32_t (*f)(uint32_t)) {
  std::vector<uint32_t> cps = decode(s);
  for (uint32_t& c : cps) c = f(c);
  return encode(cps);
}

// str.strip(chars) on one or both sides (chars undefined or None: whitespace).
std::string strip(Renderer& r, const std::string& s, const Value& chars, bool left, bool right,
                  int line) {
  const std::vector<uint32_t> cps = decode(s);
  std::vector<uint32_t> set;
  const bool ws = chars.is_undefined() || chars.kind == Kind::kNone;
  if (!ws) set = decode(need_str(r, chars, "strip()", line));
  auto drop = [&](uint32_t c) {
    return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && drop(cps[b])) ++b;
  while (right && e > b && drop(cps[e - 1])) --e;
  return encode(cps, b, e);
}

// str.split(sep, maxsplit) (sep None: runs of whitespace), and rsplit.
std::vector<Value> split(Renderer& r, const std::string& s, const Value& sep, int64_t maxsplit,
                         bool from_right, int line) {
  std::vector<std::string> parts;
  if (sep.is_undefined() || sep.kind == Kind::kNone) {
    std::vector<uint32_t> cps = decode(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
        j = cps.size();
        while (j > i && is_py_space(cps[j - 1])) --j;
      } else {
        while (j < cps.size() && !is_py_space(cps[j])) ++j;
      }
      std::vector<uint32_t> part(cps.begin() + i, cps.begin() + j);
      if (from_right) std::reverse(part.begin(), part.end());
      parts.push_back(encode(part));
      i = j;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
  } else {
    const std::string d = need_str(r, sep, "split()", line);
    if (d.empty()) fail(r, line, "split(): empty separator");
    if (!from_right) {
      size_t at = 0;
      for (size_t p; (maxsplit < 0 || int64_t(parts.size()) < maxsplit) &&
                     (p = s.find(d, at)) != std::string::npos;
           at = p + d.size())
        parts.push_back(s.substr(at, p - at));
      parts.push_back(s.substr(at));
    } else {
      size_t end = s.size();
      for (size_t p; (maxsplit < 0 || int64_t(parts.size()) < maxsplit) && end >= d.size() &&
                     (p = s.rfind(d, end - d.size())) != std::string::npos;
           end = p)
        parts.push_back(s.substr(p + d.size(), end - p - d.size()));
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  check_items(r, parts.size(), line);
  charge(r, parts.size() + s.size() / 64, line);
  std::vector<Value> out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string replace_all(Renderer& r, const std::string& s, const std::string& from,
                        const std::string& to, int64_t count, int line) {
  std::string out;
  size_t at = 0;
  int64_t n = 0;
  if (from.empty()) {  // Python inserts `to` between characters and at both ends
    const std::vector<size_t> offs = char_offsets(s);
    for (size_t i = 0; i <= offs.size(); ++i) {
      if (count < 0 || n < count) out += to, ++n;
      if (i < offs.size())
        out.append(s, offs[i], (i + 1 < offs.size() ? offs[i + 1] : s.size()) - offs[i]);
      check_size(r, out.size(), line);
    }
    return out;
  }
  for (size_t p; (count < 0 || n < count) && (p = s.find(from, at)) != std::string::npos; ++n) {
    out.append(s, at, p - at);
    out += to;
    at = p + from.size();
    check_size(r, out.size(), line);
  }
  charge(r, 1 + s.size() / 64, line);
  return out + s.substr(at);
}

bool starts_or_ends(Renderer& r, const std::string& s, const Value& affix, bool start, int line) {
  if (affix.kind == Kind::kList && affix.obj->tuple) {
    for (const Value& a : affix.obj->items)
      if (starts_or_ends(r, s, a, start, line)) return true;
    return false;
  }
  const std::string a = need_str(r, affix, start ? "startswith()" : "endswith()", line);
  if (a.size() > s.size()) return false;
  return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

size_t count_of(const std::string& s, const std::string& sub) {
  if (sub.empty()) return char_count(s) + 1;
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

// A code point index from a byte offset (str.find returns code points).
int64_t char_index(const std::string& s, size_t byte) {
  return byte == std::string::npos ? -1 : int64_t(char_count(s.substr(0, byte)));
}

// str.format with {} and {0} / {name} fields (no format specs).
std::string format(Renderer& r, const std::string& f, const Args& a, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if ((f[i] == '{' || f[i] == '}') && i + 1 < f.size() && f[i + 1] == f[i]) {
      out += f[i++];
      continue;
    }
    if (f[i] != '{') {
      out += f[i];
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) fail(r, line, "format(): a `{` is never closed");
    const std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      fail(r, line, "format(): only {} fields without format specs are supported");
    Value v;
    if (field.empty()) {
      v = arg(a, auto_index++, "");
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      v = arg(a, size_t(std::atoi(field.c_str())), "");
    } else {
      v = arg(a, SIZE_MAX, field.c_str());
    }
    if (v.is_undefined()) fail(r, line, "format(): no argument for {" + field + "}");
    out += py_str(v);
    check_size(r, out.size(), line);
    i = close;
  }
  return out;
}

// The `attribute=` of map, selectattr, join, sort and sum, as jinja2's make_attrgetter reads it:
// a dotted path ("a.b.0"), each part a key (digits: an index), an integer as an index.
Value attr_path(Renderer& r, const Value& x, const Value& attr, int line) {
  if (attr.kind == Kind::kInt) return get_item(r, x, attr, line);
  const std::string path = py_str(attr);
  Value v = x;
  size_t at = 0;
  for (;;) {
    const size_t dot = path.find('.', at);
    const std::string part =
        path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = digits && part.size() < 18 ? get_item(r, v, Value::integer(std::stoll(part)), line)
                                   : get_item(r, v, Value::string(part), line);
    if (dot == std::string::npos) return v;
    at = dot + 1;
  }
}

// ---- str methods ----

Value m_strip(Renderer& r, const Value& s, Args& a, int line) {
  return Value::string(strip(r, s.text, arg(a, 0, "chars"), true, true, line));
}
Value m_lstrip(Renderer& r, const Value& s, Args& a, int line) {
  return Value::string(strip(r, s.text, arg(a, 0, "chars"), true, false, line));
}
Value m_rstrip(Renderer& r, const Value& s, Args& a, int line) {
  return Value::string(strip(r, s.text, arg(a, 0, "chars"), false, true, line));
}
int64_t maxsplit_of(Renderer& r, const Args& a, int line) {
  const Value m = arg(a, 1, "maxsplit", Value::integer(-1));
  return need_int(r, m, "split()'s maxsplit", line);
}
Value m_split(Renderer& r, const Value& s, Args& a, int line) {
  return make_list(split(r, s.text, arg(a, 0, "sep"), maxsplit_of(r, a, line), false, line));
}
Value m_rsplit(Renderer& r, const Value& s, Args& a, int line) {
  return make_list(split(r, s.text, arg(a, 0, "sep"), maxsplit_of(r, a, line), true, line));
}
Value m_splitlines(Renderer& r, const Value& s, Args& a, int line) {
  std::vector<Value> out;
  size_t at = 0;
  const std::string& t = s.text;
  while (at < t.size()) {
    size_t p = t.find_first_of("\n\r", at);
    if (p == std::string::npos) p = t.size();
    out.push_back(Value::string(t.substr(at, p - at)));
    at = p + (p + 1 < t.size() && t[p] == '\r' && t[p + 1] == '\n' ? 2 : 1);
  }
  check_items(r, out.size(), line);
  return make_list(std::move(out));
}
Value m_startswith(Renderer& r, const Value& s, Args& a, int line) {
  return Value::boolean(starts_or_ends(r, s.text, arg(a, 0, "prefix"), true, line));
}
Value m_endswith(Renderer& r, const Value& s, Args& a, int line) {
  return Value::boolean(starts_or_ends(r, s.text, arg(a, 0, "suffix"), false, line));
}
Value m_upper(Renderer&, const Value& s, Args&, int) {
  return Value::string(map_case(s.text, upper));
}
Value m_lower(Renderer&, const Value& s, Args&, int) {
  return Value::string(map_case(s.text, lower));
}

// str.title(): a cased letter after an uncased character starts a word.
Value m_title(Renderer&, const Value& s, Args&, int) {
  std::vector<uint32_t> cps = decode(s.text);
  bool prev_cased = false;
  for (uint32_t& c : cps) {
    c = prev_cased ? lower(c) : upper(c);
    prev_cased = is_alpha(c);
  }
  return Value::string(encode(cps));
}
Value m_capitalize(Renderer&, const Value& s, Args&, int) {
  std::vector<uint32_t> cps = decode(s.text);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i ? lower(cps[i]) : upper(cps[i]);
  return Value::string(encode(cps));
}
Value m_replace(Renderer& r, const Value& s, Args& a, int line) {
  const std::string from = need_str(r, arg(a, 0, "old"), "replace()", line);
  const std::string to = need_str(r, arg(a, 1, "new"), "replace()", line);
  const int64_t count = need_int(r, arg(a, 2, "count", Value::integer(-1)), "replace()", line);
  return Value::string(replace_all(r, s.text, from, to, count, line));
}
Value m_find(Renderer& r, const Value& s, Args& a, int line) {
  return Value::integer(
      char_index(s.text, s.text.find(need_str(r, arg(a, 0, "sub"), "find()", line))));
}
Value m_rfind(Renderer& r, const Value& s, Args& a, int line) {
  return Value::integer(
      char_index(s.text, s.text.rfind(need_str(r, arg(a, 0, "sub"), "rfind()", line))));
}
Value m_count(Renderer& r, const Value& s, Args& a, int line) {
  if (s.kind == Kind::kList) {
    int64_t n = 0;
    for (const Value& x : s.obj->items) n += py_equal(x, arg(a, 0, "x"));
    return Value::integer(n);
  }
  return Value::integer(int64_t(count_of(s.text, need_str(r, arg(a, 0, "sub"), "count()", line))));
}
Value m_format(Renderer& r, const Value& s, Args& a, int line) {
  return Value::string(format(r, s.text, a, line));
}
Value m_join(Renderer& r, const Value& s, Args& a, int line) {
  std::string out;
  bool first = true;
  for (const Value& x : iterate(r, arg(a, 0, "iterable"), line)) {
    out += (first ? "" : s.text) + need_str(r, x, "join()", line);
    first = false;
    check_size(r, out.size(), line);
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(uint32_t)>
Value m_is(Renderer&, const Value& s, Args&, int) {
  const std::vector<uint32_t> cps = decode(s.text);
  return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), Pred));
}
bool is_digit(uint32_t c) { return utf8proc_category(utf8proc_int32_t(c)) == UTF8PROC_CATEGORY_ND; }
bool is_alnum(uint32_t c) { return is_alpha(c) || is_digit(c); }
bool is_space(uint32_t c) { return is_py_space(c); }

// ---- dict and list methods ----

Value m_items(Renderer& r, const Value& d, Args&, int line) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.obj->entries) out.push_back(make_list({k, v}, true));
  charge(r, out.size(), line);
  return make_list(std::move(out));
}
Value m_keys(Renderer& r, const Value& d, Args&, int line) {
  return make_list(iterate(r, d, line));
}
Value m_values(Renderer& r, const Value& d, Args&, int line) {
  std::vector<Value> out;
  for (const auto& e : d.obj->entries) out.push_back(e.second);
  charge(r, out.size(), line);
  return make_list(std::move(out));
}
Value m_get(Renderer&, const Value& d, Args& a, int) {
  const Value* v = dict_find(*d.obj, arg(a, 0, "key"));
  return v ? *v : arg(a, 1, "default", Value::none());
}
Value m_index(Renderer& r, const Value& l, Args& a, int line) {
  const auto& xs = l.obj->items;
  for (size_t i = 0; i < xs.size(); ++i)
    if (py_equal(xs[i], arg(a, 0, "x"))) return Value::integer(int64_t(i));
  fail(r, line, py_repr(arg(a, 0, "x")) + " is not in list");
}

Value m_refused(Renderer& r, const Value& v, Args&, int line) {
  fail(r, line, "a " + type_name(v) + " cannot be changed in place (the sandbox is immutable)");
}

// ---- filters ----

Value f_length(Renderer& r, const Value& v, Args&, int line) {
  if (is_iterator(v)) fail(r, line, "object of type '" + type_name(v) + "' has no len()");
  switch (v.kind) {
    case Kind::kString:
      return Value::integer(int64_t(char_count(v.text)));
    case Kind::kList:
      return Value::integer(int64_t(v.obj->items.size()));
    case Kind::kDict:
    case Kind::kNamespace:
      return Value::integer(int64_t(v.obj->entries.size()));
    case Kind::kUndefined:
      return Value::integer(0);
    default:
      fail(r, line, "object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_trim(Renderer& r, const Value& v, Args& a, int line) {
  return Value::string(strip(r, py_str(v), arg(a, 0, "chars"), true, true, line));
}

Value f_tojson(Renderer& r, const Value& v, Args& a, int line) {
  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  const Value indent = arg(a, 1, "indent", Value::none());
  if (truthy(arg(a, 3, "sort_keys", Value::boolean(false))))
    fail(r, line, "tojson(sort_keys=true) is not supported");
  if (arg(a, 2, "separators", Value::none()).kind != Kind::kNone)
    fail(r, line, "tojson(separators=...) is not supported");
  if (truthy(arg(a, 0, "ensure_ascii", Value::boolean(false))))
    fail(r, line, "tojson(ensure_ascii=true) is not supported");
  const int64_t n = indent.kind == Kind::kNone ? -1 : need_int(r, indent, "tojson's indent", line);
  if (n > 64) fail(r, line, "tojson's indent is capped at 64");
  bool ok;
  std::string s = to_json(v, int(n), ok);
  if (!ok)
    fail(r, line,
         "Object of type " + type_name(v) + " (or one inside it) is not JSON serializable");
  charge(r, s.size() / 64, line);
  return str_value(r, std::move(s), line);
}

Value f_string(Renderer& r, const Value& v, Args&, int line) {
  return str_value(r, py_str(v), line);
}
Value f_lower(Renderer&, const Value& v, Args&, int) {
  return Value::string(map_case(py_str(v), lower));
}
Value f_upper(Renderer&, const Value& v, Args&, int) {
  return Value::string(map_case(py_str(v), upper));
}
Value f_capitalize(Renderer& r, const Value& v, Args& a, int line) {
  return m_capitalize(r, Value::string(py_str(v)), a, line);
}

// jinja2's title: each word (split at -, whitespace and opening brackets) capitalised.
Value f_title(Renderer&, const Value& v, Args&, int) {
  std::vector<uint32_t> cps = decode(py_str(v));
  bool word_start = true;
  for (uint32_t& c : cps) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (!sep) c = word_start ? upper(c) : lower(c);
    word_start = sep;
  }
  return Value::string(encode(cps));
}

Value f_default(Renderer&, const Value& v, Args& a, int) {
  const bool boolean = truthy(arg(a, 1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v)))
    return arg(a, 0, "default_value", Value::string(""));
  return v;
}

Value f_first(Renderer& r, const Value& v, Args&, int line) {
  const std::vector<Value> xs = iterate(r, v, line);
  return xs.empty() ? Value::undefined("No first item, sequence was empty.") : xs.front();
}
Value f_last(Renderer& r, const Value& v, Args&, int line) {
  if (is_iterator(v)) fail(r, line, "'" + type_name(v) + "' object is not reversible");
  const std::vector<Value> xs = iterate(r, v, line);
  return xs.empty() ? Value::undefined("No last item, sequence was empty.") : xs.back();
}

Value f_join(Renderer& r, const Value& v, Args& a, int line) {
  const std::string d = py_str(arg(a, 0, "d", Value::string("")));
  const Value attr = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& x : iterate(r, v, line)) {
    const Value item = attr.is_undefined() ? x : attr_path(r, x, attr, line);
    out += (first ? "" : d) + py_str(item);
    first = false;
    check_size(r, out.size(), line);
  }
  return Value::string(std::move(out));
}

Value f_replace(Renderer& r, const Value& v, Args& a, int line) {
  const Value count = arg(a, 2, "count", Value::none());
  return Value::string(
      replace_all(r, py_str(v), py_str(arg(a, 0, "old")), py_str(arg(a, 1, "new")),
                  count.kind == Kind::kNone ? -1 : need_int(r, count, "replace", line), line));
}

Value f_reverse(Renderer& r, const Value& v, Args&, int line) {
  if (v.kind == Kind::kString) {
    std::vector<uint32_t> cps = decode(v.text);
    std::reverse(cps.begin(), cps.end());
    return Value::string(encode(cps));
  }
  if (is_iterator(v)) fail(r, line, "'" + type_name(v) + "' object is not reversible");
  std::vector<Value> xs = iterate(r, v, line);
  std::reverse(xs.begin(), xs.end());
  return make_iterator(std::move(xs), "list_reverseiterator");
}

Value f_list(Renderer& r, const Value& v, Args&, int line) {
  return make_list(iterate(r, v, line));
}

Value f_items(Renderer& r, const Value& v, Args& a, int line) {
  if (v.is_undefined()) return make_iterator({});
  if (v.kind != Kind::kDict) fail(r, line, "the items filter needs a mapping, not " + type_name(v));
  return make_iterator(m_items(r, v, a, line).obj->items);
}

// The rest of the arguments after the first `skip` positional ones (for select, map).
Args rest(const Args& a, size_t skip) {
  Args out;
  if (a.pos.size() > skip) out.pos.assign(a.pos.begin() + long(skip), a.pos.end());
  out.kw = a.kw;
  return out;
}

Value f_map(Renderer& r, const Value& v, Args& a, int line) {
  const Value attr = arg(a, SIZE_MAX, "attribute");
  std::vector<Value> out;
  if (!truthy(v)) return make_iterator(std::move(out));  // jinja2: `if value:`, so None maps to []
  for (const Value& x : iterate(r, v, line)) {
    charge(r, 1, line);
    if (!attr.is_undefined()) {
      Value y = attr_path(r, x, attr, line);
      out.push_back(y.is_undefined() ? arg(a, SIZE_MAX, "default", y) : y);
    } else {
      if (a.pos.empty()) fail(r, line, "map() needs a filter name or attribute=");
      Args more = rest(a, 1);
      out.push_back(apply_filter(r, py_str(a.pos[0]), x, more, line));
    }
  }
  return make_iterator(std::move(out));
}

// select / reject (test on the item) and selectattr / rejectattr (test on an attribute; no test:
// the attribute's truth).
Value select_impl(Renderer& r, const Value& v, Args& a, int line, bool attr, bool keep) {
  std::vector<Value> out;
  if (!truthy(v)) return make_iterator(std::move(out));  // as jinja2's: None selects nothing
  const size_t test_at = attr ? 1 : 0;
  for (const Value& x : iterate(r, v, line)) {
    charge(r, 1, line);
    const Value subject = attr ? attr_path(r, x, arg(a, 0, "attribute"), line) : x;
    bool ok;
    if (a.pos.size() > test_at) {
      Args more = rest(a, test_at + 1);
      ok = apply_test(r, py_str(a.pos[test_at]), subject, more, line);
    } else {
      ok = truthy(subject);
    }
    if (ok == keep) out.push_back(x);
  }
  return make_iterator(std::move(out));
}
Value f_select(Renderer& r, const Value& v, Args& a, int line) {
  return select_impl(r, v, a, line, false, true);
}
Value f_reject(Renderer& r, const Value& v, Args& a, int line) {
  return select_impl(r, v, a, line, false, false);
}
Value f_selectattr(Renderer& r, const Value& v, Args& a, int line) {
  return select_impl(r, v, a, line, true, true);
}
Value f_rejectattr(Renderer& r, const Value& v, Args& a, int line) {
  return select_impl(r, v, a, line, true, false);
}

Value f_int(Renderer& r, const Value& v, Args& a, int line) {
  const Value dflt = arg(a, 0, "default", Value::integer(0));
  if (v.kind == Kind::kInt || v.kind == Kind::kBool)
    return Value::integer(v.kind == Kind::kBool ? v.b : v.i);
  if (v.kind == Kind::kFloat) {
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
    return Value::integer(int64_t(v.f));
  }
  if (v.kind == Kind::kString) {
    const std::string t = strip(r, v.text, Value::undefined(), true, true, line);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && *end == '\0' && errno == 0) return Value::integer(i);
    const double f = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18)
      return Value::integer(int64_t(f));
  }
  return dflt;
}

Value f_float(Renderer& r, const Value& v, Args& a, int line) {
  const Value dflt = arg(a, 0, "default", Value::real(0));
  if (v.kind == Kind::kInt || v.kind == Kind::kBool || v.kind == Kind::kFloat)
    return Value::real(v.kind == Kind::kFloat ? v.f : double(v.kind == Kind::kBool ? v.b : v.i));
  if (v.kind == Kind::kString) {
    const std::string t = strip(r, v.text, Value::undefined(), true, true, line);
    char* end = nullptr;
    const double f = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0') return Value::real(f);
  }
  return dflt;
}

Value f_abs(Renderer& r, const Value& v, Args&, int line) {
  if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
  const int64_t i = need_int(r, v, "abs", line);
  if (i == INT64_MIN) fail(r, line, "integer overflow (past 64 bits) in abs");
  return Value::integer(i < 0 ? -i : i);
}

Value f_round(Renderer& r, const Value& v, Args& a, int line) {
  const int64_t precision = need_int(r, arg(a, 0, "precision", Value::integer(0)), "round", line);
  const std::string method = py_str(arg(a, 1, "method", Value::string("common")));
  if (v.kind != Kind::kFloat && v.kind != Kind::kInt && v.kind != Kind::kBool)
    fail(r, line, "round needs a number, not " + type_name(v));
  if (method != "common" && method != "floor" && method != "ceil")
    fail(r, line, "round's method must be common, floor or ceil");
  if (v.kind != Kind::kFloat && method == "common" && precision >= 0)
    return v;  // round(int) is int
  const double x = v.kind == Kind::kFloat ? v.f : double(v.kind == Kind::kBool ? v.b : v.i);
  const int64_t p = std::clamp<int64_t>(precision, -300, 300);
  double y;
  if (method == "common") {
    // Python's round(): correctly rounded, ties to even, as printf's %.*f rounds.
    char buf[512];
    if (p >= 0 && std::isfinite(x) && std::fabs(x) < 1e300) {
      std::snprintf(buf, sizeof buf, "%.*f", int(std::min<int64_t>(p, 100)), x);
      y = std::strtod(buf, nullptr);
    } else {
      const double scale = std::pow(10.0, double(-p));
      y = std::nearbyint(x / scale) * scale;
    }
  } else {
    const double scale = std::pow(10.0, double(p));
    y = method == "floor" ? std::floor(x * scale) / scale : std::ceil(x * scale) / scale;
  }
  return Value::real(y);  // jinja2's round returns a float, even for an int
}

Value f_safe(Renderer&, const Value& v, Args&, int) { return v; }

Value f_escape(Renderer& r, const Value& v, Args&, int line) {
  std::string out;
  for (char c : py_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return str_value(r, std::move(out), line);
}

Value f_unique(Renderer& r, const Value& v, Args&, int line) {
  std::vector<Value> out;
  for (const Value& x : iterate(r, v, line)) {
    charge(r, out.size(), line);
    auto same = [&](const Value& y) { return py_equal(x, y); };
    if (std::none_of(out.begin(), out.end(), same)) out.push_back(x);
  }
  return make_iterator(std::move(out));
}

std::vector<Value> sorted(Renderer& r, std::vector<Value> xs, int line,
                          const std::function<Value(const Value&)>& key) {
  charge(r, xs.size() * 20, line);
  std::string error;
  std::stable_sort(xs.begin(), xs.end(), [&](const Value& a, const Value& b) {
    bool ok;
    const Value ka = key(a), kb = key(b);
    const int c = py_compare(ka, kb, ok);
    if (!ok && error.empty()) error = "cannot order " + type_name(ka) + " and " + type_name(kb);
    return ok && c < 0;
  });
  if (!error.empty()) fail(r, line, error);
  return xs;
}

Value f_dictsort(Renderer& r, const Value& v, Args& a, int line) {
  if (v.kind != Kind::kDict) fail(r, line, "dictsort needs a dict, not " + type_name(v));
  const bool by_value = py_str(arg(a, 1, "by", Value::string("key"))) == "value";
  std::vector<Value> xs = m_items(r, v, a, line).obj->items;
  xs =
      sorted(r, std::move(xs), line, [by_value](const Value& p) { return p.obj->items[by_value]; });
  if (truthy(arg(a, 2, "reverse", Value::boolean(false)))) std::reverse(xs.begin(), xs.end());
  return make_list(std::move(xs));
}

Value f_sort(Renderer& r, const Value& v, Args& a, int line) {
  const Value attr = arg(a, 2, "attribute");
  std::vector<Value> xs = sorted(r, iterate(r, v, line), line, [&](const Value& x) {
    return attr.is_undefined() ? x : attr_path(r, x, attr, line);
  });
  if (truthy(arg(a, 0, "reverse", Value::boolean(false)))) std::reverse(xs.begin(), xs.end());
  return make_list(std::move(xs));
}

Value f_indent(Renderer& r, const Value& v, Args& a, int line) {
  const Value w = arg(a, 0, "width", Value::integer(4));
  const std::string pad =
      w.kind == Kind::kString
          ? w.text
          : std::string(size_t(std::clamp<int64_t>(need_int(r, w, "indent", line), 0, 256)), ' ');
  const bool first = truthy(arg(a, 1, "first", Value::boolean(false)));
  const bool blank = truthy(arg(a, 2, "blank", Value::boolean(false)));
  const std::string s = py_str(v);
  std::string out;
  size_t at = 0;
  for (bool first_line = true; at <= s.size(); first_line = false) {
    size_t nl = s.find('\n', at);
    const std::string ln = s.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if ((!first_line || first) && (blank || !ln.empty())) out += pad;
    out += ln;
    check_size(r, out.size(), line);
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
  }
  return Value::string(std::move(out));
}

Value f_sum(Renderer& r, const Value& v, Args& a, int line) {
  Value acc = arg(a, 1, "start", Value::integer(0));
  const Value attr = arg(a, 0, "attribute");
  for (const Value& x : iterate(r, v, line)) {
    const Value y = attr.is_undefined() ? x : attr_path(r, x, attr, line);
    bool ok = (y.kind == Kind::kInt || y.kind == Kind::kBool || y.kind == Kind::kFloat) &&
              (acc.kind == Kind::kInt || acc.kind == Kind::kFloat);
    if (!ok) fail(r, line, "sum needs numbers, not " + type_name(y));
    if (acc.kind == Kind::kInt && y.kind != Kind::kFloat) {
      int64_t s;
      if (__builtin_add_overflow(acc.i, y.kind == Kind::kBool ? y.b : y.i, &s))
        fail(r, line, "integer overflow (past 64 bits) in sum");
      acc = Value::integer(s);
    } else {
      const double ya = y.kind == Kind::kFloat ? y.f : double(y.kind == Kind::kBool ? y.b : y.i);
      acc = Value::real((acc.kind == Kind::kFloat ? acc.f : double(acc.i)) + ya);
    }
  }
  return acc;
}

Value min_max(Renderer& r, const Value& v, int line, bool want_max) {
  std::vector<Value> xs = sorted(r, iterate(r, v, line), line, [](const Value& x) { return x; });
  if (xs.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  return want_max ? xs.back() : xs.front();
}
Value f_min(Renderer& r, const Value& v, Args&, int line) { return min_max(r, v, line, false); }
Value f_max(Renderer& r, const Value& v, Args&, int line) { return min_max(r, v, line, true); }

Value f_center(Renderer& r, const Value& v, Args& a, int line) {
  const std::string s = py_str(v);
  const int64_t width =
      std::min<int64_t>(need_int(r, arg(a, 0, "width", Value::integer(80)), "center", line), 4096);
  const int64_t len = int64_t(char_count(s));
  if (width <= len) return Value::string(s);
  const int64_t total = width - len, left = total / 2 + (total & width & 1);
  return Value::string(std::string(size_t(left), ' ') + s + std::string(size_t(total - left), ' '));
}

Value f_wordcount(Renderer& r, const Value& v, Args&, int line) {
  return Value::integer(int64_t(split(r, py_str(v), Value::undefined(), -1, false, line).size()));
}

// ---- tests ----

bool is_number(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kBool || v.kind == Kind::kFloat;
}

Value test_result(bool b) { return Value::boolean(b); }

Value t_defined(Renderer&, const Value& v, Args&, int) { return test_result(!v.is_undefined()); }
Value t_undefined(Renderer&, const Value& v, Args&, int) { return test_result(v.is_undefined()); }
Value t_none(Renderer&, const Value& v, Args&, int) { return test_result(v.kind == Kind::kNone); }
Value t_string(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kString);
}
Value t_number(Renderer&, const Value& v, Args&, int) { return test_result(is_number(v)); }
Value t_integer(Renderer&, const Value& v, Args&, int) { return test_result(v.kind == Kind::kInt); }
Value t_float(Renderer&, const Value& v, Args&, int) { return test_result(v.kind == Kind::kFloat); }
Value t_boolean(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kBool);
}
Value t_true(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kBool && v.b);
}
Value t_false(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kBool && !v.b);
}
Value t_mapping(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kDict);
}
Value t_callable(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kCallable);
}
// iter() and len()+[] succeed for these (Undefined too: it iterates as empty).
Value t_iterable(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kString || v.kind == Kind::kList || v.kind == Kind::kDict ||
                     v.kind == Kind::kUndefined);
}
Value t_sequence(Renderer& r, const Value& v, Args& a, int line) {
  return t_iterable(r, v, a, line);
}
Value t_odd(Renderer& r, const Value& v, Args&, int line) {
  return test_result(need_int(r, v, "odd", line) % 2 != 0);
}
Value t_even(Renderer& r, const Value& v, Args&, int line) {
  return test_result(need_int(r, v, "even", line) % 2 == 0);
}
Value t_divisibleby(Renderer& r, const Value& v, Args& a, int line) {
  const int64_t d = need_int(r, arg(a, 0, "num"), "divisibleby", line);
  if (d == 0) fail(r, line, "divisibleby 0");
  return test_result(d == -1 || need_int(r, v, "divisibleby", line) % d == 0);
}
Value t_eq(Renderer&, const Value& v, Args& a, int) {
  return test_result(py_equal(v, arg(a, 0, "other")));
}
Value t_ne(Renderer&, const Value& v, Args& a, int) {
  return test_result(!py_equal(v, arg(a, 0, "other")));
}
Value order_test(Renderer& r, const Value& v, const Value& w, int line, bool (*want)(int)) {
  bool ok;
  const int c = py_compare(v, w, ok);
  if (!ok) fail(r, line, "cannot order " + type_name(v) + " and " + type_name(w));
  return test_result(want(c));
}
Value t_lt(Renderer& r, const Value& v, Args& a, int line) {
  return order_test(r, v, arg(a, 0, "other"), line, [](int c) { return c < 0; });
}
Value t_le(Renderer& r, const Value& v, Args& a, int line) {
  return order_test(r, v, arg(a, 0, "other"), line, [](int c) { return c <= 0; });
}
Value t_gt(Renderer& r, const Value& v, Args& a, int line) {
  return order_test(r, v, arg(a, 0, "other"), line, [](int c) { return c > 0; });
}
Value t_ge(Renderer& r, const Value& v, Args& a, int line) {
  return order_test(r, v, arg(a, 0, "other"), line, [](int c) { return c >= 0; });
}
Value t_in(Renderer& r, const Value& v, Args& a, int line) {
  const Value seq = arg(a, 0, "seq");
  if (seq.kind == Kind::kString && v.kind == Kind::kString)
    return test_result(seq.text.find(v.text) != std::string::npos);
  if (seq.kind == Kind::kDict) return test_result(dict_find(*seq.obj, v) != nullptr);
  for (const Value& x : iterate(r, seq, line))
    if (py_equal(x, v)) return test_result(true);
  return test_result(false);
}
Value t_sameas(Renderer&, const Value& v, Args& a, int) {
  const Value w = arg(a, 0, "other");
  if (v.obj || w.obj) return test_result(v.obj == w.obj);
  return test_result(v.kind == w.kind && py_equal(v, w) &&
                     (v.kind == Kind::kNone || v.kind == Kind::kBool));
}
Value t_lower(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kString && map_case(v.text, lower) == v.text);
}
Value t_upper(Renderer&, const Value& v, Args&, int) {
  return test_result(v.kind == Kind::kString && map_case(v.text, upper) == v.text);
}

const std::map<std::string, Builtin>& filters() {
  static const std::map<std::string, Builtin> kFilters = {{"abs", f_abs},
                                                          {"capitalize", f_capitalize},
                                                          {"center", f_center},
                                                          {"count", f_length},
                                                          {"d", f_default},
                                                          {"default", f_default},
                                                          {"dictsort", f_dictsort},
                                                          {"e", f_escape},
                                                          {"escape", f_escape},
                                                          {"first", f_first},
                                                          {"float", f_float},
                                                          {"indent", f_indent},
                                                          {"int", f_int},
                                                          {"items", f_items},
                                                          {"join", f_join},
                                                          {"last", f_last},
                                                          {"length", f_length},
                                                          {"list", f_list},
                                                          {"lower", f_lower},
                                                          {"map", f_map},
                                                          {"max", f_max},
                                                          {"min", f_min},
                                                          {"reject", f_reject},
                                                          {"rejectattr", f_rejectattr},
                                                          {"replace", f_replace},
                                                          {"reverse", f_reverse},
                                                          {"round", f_round},
                                                          {"safe", f_safe},
                                                          {"select", f_select},
                                                          {"selectattr", f_selectattr},
                                                          {"sort", f_sort},
                                                          {"string", f_string},
                                                          {"sum", f_sum},
                                                          {"title", f_title},
                                                          {"tojson", f_tojson},
                                                          {"trim", f_trim},
                                                          {"unique", f_unique},
                                                          {"upper", f_upper},
                                                          {"wordcount", f_wordcount}};
  return kFilters;
}

const std::map<std::string, Builtin>& tests() {
  static const std::map<std::string, Builtin> kTests = {{"defined", t_defined},
                                                        {"undefined", t_undefined},
                                                        {"none", t_none},
                                                        {"string", t_string},
                                                        {"number", t_number},
                                                        {"integer", t_integer},
                                                        {"float", t_float},
                                                        {"boolean", t_boolean},
                                                        {"true", t_true},
                                                        {"false", t_false},
                                                        {"mapping", t_mapping},
                                                        {"iterable", t_iterable},
                                                        {"sequence", t_sequence},
                                                        {"callable", t_callable},
                                                        {"odd", t_odd},
                                                        {"even", t_even},
                                                        {"divisibleby", t_divisibleby},
                                                        {"eq", t_eq},
                                                        {"equalto", t_eq},
                                                        {"==", t_eq},
                                                        {"ne", t_ne},
                                                        {"!=", t_ne},
                                                        {"lt", t_lt},
                                                        {"lessthan", t_lt},
                                                        {"le", t_le},
                                                        {"gt", t_gt},
                                                        {"greaterthan", t_gt},
                                                        {"ge", t_ge},
                                                        {"in", t_in},
                                                        {"sameas", t_sameas},
                                                        {"lower", t_lower},
                                                        {"upper", t_upper}};
  return kTests;
}

// ---- globals ----

Value g_raise_exception(Renderer& r, Args& a, int line) {
  raise_from_template(r, line, py_str(arg(a, 0, "message")));
}

// Now, or SOURCE_DATE_EPOCH's moment where set to a number of seconds (the reproducible-builds
// convention: a rendering, and the tokens cached from it, that do not move with the day; the
// goldens' test renders on the day transformers did).
std::time_t render_time() {
  const char* fixed = std::getenv("SOURCE_DATE_EPOCH");
  if (fixed != nullptr && *fixed != '\0') {
    char* end = nullptr;
    const long long seconds = std::strtoll(fixed, &end, 10);
    if (*end == '\0' && seconds >= 0) return static_cast<std::time_t>(seconds);
  }
  return std::time(nullptr);
}

Value g_strftime_now(Renderer& r, Args& a, int line) {
  const std::string fmt = need_str(r, arg(a, 0, "format"), "strftime_now()", line);
  if (fmt.size() > 256) fail(r, line, "strftime_now()'s format is capped at 256 bytes");
  const std::time_t now = render_time();
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[4096];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

// range() as the sandbox allows it: at most 100,000 items (jinja2's MAX_RANGE), and
// Limits::max_items.
Value g_range(Renderer& r, Args& a, int line) {
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = need_int(r, a.pos[0], "range()", line);
  } else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = need_int(r, a.pos[0], "range()", line);
    stop = need_int(r, a.pos[1], "range()", line);
    if (a.pos.size() == 3) step = need_int(r, a.pos[2], "range()", line);
  } else {
    fail(r, line, "range() takes 1 to 3 integer arguments");
  }
  if (step == 0) fail(r, line, "range() arg 3 must not be zero");
  const long double n = std::max<long double>(0, std::ceil(((long double)stop - start) / step));
  const size_t cap = std::min<size_t>(100000, limits_of(r).max_items);
  if (n > cap)
    fail(r, line,
         "range() of " + std::to_string(uint64_t(n)) + " items, more than the sandbox's cap of " +
             std::to_string(cap));
  std::vector<Value> xs;
  for (int64_t k = 0; k < int64_t(n); ++k) xs.push_back(Value::integer(start + k * step));
  charge(r, xs.size(), line);
  return make_list(std::move(xs));
}

Value g_namespace(Renderer& r, Args& a, int line) {
  std::vector<std::pair<Value, Value>> es;
  for (const Value& p : a.pos) {  // namespace(a_dict) copies its entries
    if (p.kind != Kind::kDict) fail(r, line, "namespace() takes keyword arguments or a dict");
    es.insert(es.end(), p.obj->entries.begin(), p.obj->entries.end());
  }
  for (auto& [k, v] : a.kw) es.emplace_back(Value::string(k), v);
  for (const auto& e : es)
    if (e.second.kind == Kind::kNamespace || (e.second.obj && e.second.obj->holds_namespace))
      fail(r, line, "a namespace cannot hold a namespace (it could then hold itself)");
  Value v = make_dict(std::move(es));
  v.kind = Kind::kNamespace;
  return v;
}

Value g_dict(Renderer& r, Args& a, int line) {
  if (!a.pos.empty()) fail(r, line, "dict() takes keyword arguments only here");
  std::vector<std::pair<Value, Value>> es;
  for (auto& [k, v] : a.kw) es.emplace_back(Value::string(k), v);
  return make_dict(std::move(es));
}

}  // namespace

Builtin find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

Builtin find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

Builtin find_method(const Value& subject, const std::string& name) {
  static const std::map<std::string, Builtin> kStr = {
      {"strip", m_strip},           {"lstrip", m_lstrip},
      {"rstrip", m_rstrip},         {"split", m_split},
      {"rsplit", m_rsplit},         {"splitlines", m_splitlines},
      {"startswith", m_startswith}, {"endswith", m_endswith},
      {"upper", m_upper},           {"lower", m_lower},
      {"title", m_title},           {"capitalize", m_capitalize},
      {"replace", m_replace},       {"find", m_find},
      {"rfind", m_rfind},           {"count", m_count},
      {"format", m_format},         {"join", m_join},
      {"isdigit", m_is<is_digit>},  {"isalpha", m_is<is_alpha>},
      {"isalnum", m_is<is_alnum>},  {"isspace", m_is<is_space>}};
  static const std::map<std::string, Builtin> kDict = {
      {"items", m_items},    {"keys", m_keys},   {"values", m_values},      {"get", m_get},
      {"update", m_refused}, {"pop", m_refused}, {"setdefault", m_refused}, {"clear", m_refused}};
  static const std::map<std::string, Builtin> kList = {
      {"index", m_index},     {"count", m_count},    {"append", m_refused}, {"extend", m_refused},
      {"pop", m_refused},     {"insert", m_refused}, {"remove", m_refused}, {"sort", m_refused},
      {"reverse", m_refused}, {"clear", m_refused}};
  const std::map<std::string, Builtin>* table = subject.kind == Kind::kString ? &kStr
                                                : subject.kind == Kind::kDict ? &kDict
                                                : subject.kind == Kind::kList ? &kList
                                                                              : nullptr;
  if (!table) return nullptr;
  auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
  return {{"raise_exception", make_callable("raise_exception", g_raise_exception)},
          {"strftime_now", make_callable("strftime_now", g_strftime_now)},
          {"range", make_callable("range", g_range)},
          {"namespace", make_callable("namespace", g_namespace)},
          {"dict", make_callable("dict", g_dict)}};
}

namespace {

// How many positional arguments a filter or test takes beside its subject, as jinja2's (and
// transformers' tojson) signatures say; -1: any (the ones that pass them on). More is an error,
// as it is in Python.
int max_positional(const std::string& name, bool filter) {
  static const std::map<std::string, int> kFilters = {
      {"center", 1},  {"d", 2},           {"default", 2},     {"dictsort", 3}, {"float", 1},
      {"indent", 3},  {"int", 2},         {"join", 2},        {"map", -1},     {"max", 2},
      {"min", 2},     {"reject", -1},     {"rejectattr", -1}, {"replace", 3},  {"round", 2},
      {"select", -1}, {"selectattr", -1}, {"sort", 3},        {"sum", 2},      {"tojson", 4},
      {"trim", 1},    {"unique", 2}};
  static const std::set<std::string> kOneArgTests = {"divisibleby", "eq", "equalto",  "==",    "ne",
                                                     "!=",          "lt", "lessthan", "le",    "gt",
                                                     "greaterthan", "ge", "in",       "sameas"};
  if (!filter) return kOneArgTests.count(name) ? 1 : 0;
  auto it = kFilters.find(name);
  return it == kFilters.end() ? 0 : it->second;
}

void check_arity(Renderer& r, const std::string& name, bool filter, const Args& args, int line) {
  const int most = max_positional(name, filter);
  if (most >= 0 && args.pos.size() > size_t(most))
    fail(r, line,
         std::string(filter ? "filter" : "test") + " '" + name + "' takes at most " +
             std::to_string(most) + " positional argument(s), " + std::to_string(args.pos.size()) +
             " given");
}

}  // namespace

Value apply_filter(Renderer& r, const std::string& name, const Value& v, Args& args, int line) {
  Builtin f = find_filter(name);
  if (!f) fail(r, line, "no filter named '" + name + "'");
  check_arity(r, name, true, args, line);
  return f(r, v, args, line);
}

bool apply_test(Renderer& r, const std::string& name, const Value& v, Args& args, int line) {
  Builtin t = find_test(name);
  if (!t) fail(r, line, "no test named '" + name + "'");
  check_arity(r, name, false, args, line);
  return truthy(t(r, v, args, line));
}

}  // namespace fsdp::data::jinja
