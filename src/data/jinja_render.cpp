// The Jinja subset's renderer: walks the syntax tree with jinja2's scoping (a `{% for %}`
// iteration and a macro call are scopes, `{% if %}` is not; a `{% set %}` inside a loop ends with
// its iteration, which is what namespace() is for) and Python's operators, and keeps the count of
// every resource a template can make it spend (Limits): output and string sizes, loop
// iterations, evaluation steps, macro call depth. A cap reached is an Error naming it.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "data/jinja_internal.h"

namespace fsdp::data::jinja {

// Variables of one scope; lookups walk `parent`s up to the globals.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;
};

struct Renderer {
  const TemplateImpl& t;
  std::string out;
  uint64_t steps = 0, iterations = 0;
  int call_depth = 0;
  Frame globals, root;
  Frame* scope = &root;

  explicit Renderer(const TemplateImpl& tmpl) : t(tmpl) { root.parent = &globals; }
};

void fail(Renderer& r, int line, const std::string& message) {
  throw Error(r.t.origin, line, message);
}

void raise_from_template(Renderer& r, int line, const std::string& message) {
  throw Error(r.t.origin, line, message, true);
}

void charge(Renderer& r, uint64_t steps, int line) {
  r.steps += steps;
  if (r.steps > r.t.limits.max_steps)
    fail(r, line,
         "the rendering took more than " + std::to_string(r.t.limits.max_steps) +
             " evaluation steps (the cap on work)");
}

void check_size(Renderer& r, size_t bytes, int line) {
  if (bytes > r.t.limits.max_output_bytes)
    fail(r, line,
         "a string of " + std::to_string(bytes) + " bytes, past the cap on the output (" +
             std::to_string(r.t.limits.max_output_bytes) + " bytes, for any string too)");
}

void check_items(Renderer& r, size_t n, int line) {
  if (n > r.t.limits.max_items)
    fail(r, line,
         "a list or dict of " + std::to_string(n) + " items, past the cap on items (" +
             std::to_string(r.t.limits.max_items) + ")");
}

const Limits& limits_of(const Renderer& r) { return r.t.limits; }

namespace {

enum class Flow { kNormal, kBreak, kContinue };

Value eval(Renderer& r, const Node& n);
Flow exec(Renderer& r, const std::vector<NodePtr>& body);

[[noreturn]] void undefined_error(Renderer& r, const Value& v, int line) {
  fail(r, line, v.text.empty() ? "an undefined value was used" : v.text);
}

void check_value_depth(Renderer& r, const Value& v, int line) {
  if (depth_of(v) > r.t.limits.max_value_depth)
    fail(r, line,
         "lists and dicts nested deeper than " + std::to_string(r.t.limits.max_value_depth) +
             " levels (the cap on values)");
}

Value lookup(Renderer& r, const std::string& name) {
  for (const Frame* f = r.scope; f; f = f->parent) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

// The text rendered by `body` in a scope of its own output (macros, block sets, filter blocks).
std::string capture(Renderer& r, const std::vector<NodePtr>& body) {
  std::string saved;
  std::swap(saved, r.out);
  try {
    exec(r, body);
  } catch (...) {
    std::swap(saved, r.out);
    throw;
  }
  std::swap(saved, r.out);
  return saved;
}

void emit(Renderer& r, const std::string& s, int line) {
  charge(r, 1 + s.size() / 64, line);
  check_size(r, r.out.size() + s.size(), line);
  r.out += s;
}

// ---- operators ----

bool is_num(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kBool || v.kind == Kind::kFloat;
}
bool is_int(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t int_of(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }
double num_of(const Value& v) { return v.kind == Kind::kFloat ? v.f : double(int_of(v)); }

[[noreturn]] void bad_operands(Renderer& r, const std::string& op, const Value& a, const Value& b,
                               int line) {
  if (a.is_undefined()) undefined_error(r, a, line);
  if (b.is_undefined()) undefined_error(r, b, line);
  fail(r, line,
       "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
           "'");
}

Value int_result(Renderer& r, bool overflow, int64_t v, int line) {
  if (overflow) fail(r, line, "integer overflow (past 64 bits) in arithmetic");
  return Value::integer(v);
}

Value repeat(Renderer& r, const Value& seq, int64_t n, int line) {
  n = std::max<int64_t>(n, 0);
  if (seq.kind == Kind::kString) {
    if (n && seq.text.size() > r.t.limits.max_output_bytes / uint64_t(n))
      check_size(r, r.t.limits.max_output_bytes + 1, line);
    charge(r, 1 + seq.text.size() * n / 64, line);
    std::string s;
    for (int64_t k = 0; k < n; ++k) s += seq.text;
    return Value::string(std::move(s));
  }
  const auto& xs = seq.obj->items;
  if (n && xs.size() > r.t.limits.max_items / uint64_t(n))
    check_items(r, r.t.limits.max_items + 1, line);
  charge(r, 1 + xs.size() * n, line);
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), xs.begin(), xs.end());
  return make_list(std::move(out), seq.obj->tuple);
}

Value add(Renderer& r, const Value& a, const Value& b, int line) {
  int64_t v = 0;
  if (is_int(a) && is_int(b)) {
    const bool overflow = __builtin_add_overflow(int_of(a), int_of(b), &v);
    return int_result(r, overflow, v, line);
  }
  if (is_num(a) && is_num(b)) return Value::real(num_of(a) + num_of(b));
  if (a.kind == Kind::kString && b.kind == Kind::kString) {
    check_size(r, a.text.size() + b.text.size(), line);
    charge(r, (a.text.size() + b.text.size()) / 64, line);
    return Value::string(a.text + b.text);
  }
  if (a.kind == Kind::kList && b.kind == Kind::kList && a.obj->tuple == b.obj->tuple &&
      !is_iterator(a) && !is_iterator(b)) {
    std::vector<Value> xs = a.obj->items;
    check_items(r, xs.size() + b.obj->items.size(), line);
    charge(r, xs.size() + b.obj->items.size(), line);
    xs.insert(xs.end(), b.obj->items.begin(), b.obj->items.end());
    return make_list(std::move(xs), a.obj->tuple);
  }
  bad_operands(r, "+", a, b, line);
}

Value power(Renderer& r, const Value& a, const Value& b, int line) {
  if (is_int(a) && is_int(b) && int_of(b) >= 0) {
    int64_t base = int_of(a), e = int_of(b), acc = 1;
    bool overflow = false;
    while (e > 0 && !overflow) {  // squaring: at most 64 rounds
      if (e & 1) overflow |= __builtin_mul_overflow(acc, base, &acc);
      e >>= 1;
      if (e) overflow |= __builtin_mul_overflow(base, base, &base);
    }
    return int_result(r, overflow, acc, line);
  }
  if (is_num(a) && is_num(b)) {
    const double x = num_of(a), y = num_of(b), z = std::pow(x, y);
    if (std::isinf(z) && std::isfinite(x) && std::isfinite(y)) {
      fail(r, line,
           x == 0 ? "0.0 cannot be raised to a negative power"
                  : "(34, 'Numerical result out of range') in **");
    }
    return Value::real(z);
  }
  bad_operands(r, "**", a, b, line);
}

Value divide(Renderer& r, const std::string& op, const Value& a, const Value& b, int line) {
  if (!is_num(a) || !is_num(b)) bad_operands(r, op, a, b, line);
  if (num_of(b) == 0) fail(r, line, "division by zero");
  if (op == "/") return Value::real(num_of(a) / num_of(b));
  if (is_int(a) && is_int(b)) {
    const int64_t x = int_of(a), y = int_of(b);
    if (x == INT64_MIN && y == -1) fail(r, line, "integer overflow (past 64 bits) in arithmetic");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value::integer(op == "//" ? q : m);
  }
  const double x = num_of(a), y = num_of(b);
  if (op == "//") return Value::real(std::floor(x / y));
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::real(m);
}

Value binary(Renderer& r, const std::string& op, const Value& a, const Value& b, int line) {
  int64_t v = 0;
  if (op == "+") return add(r, a, b, line);
  if (op == "**") return power(r, a, b, line);
  if (op == "/" || op == "//" || op == "%") {
    if (op == "%" && a.kind == Kind::kString)
      fail(r, line, "string formatting with `%` is not supported (use ~ or format())");
    return divide(r, op, a, b, line);
  }
  if (op == "*") {
    if ((a.kind == Kind::kString || (a.kind == Kind::kList && !is_iterator(a))) && is_int(b))
      return repeat(r, a, int_of(b), line);
    if ((b.kind == Kind::kString || (b.kind == Kind::kList && !is_iterator(b))) && is_int(a))
      return repeat(r, b, int_of(a), line);
    if (is_int(a) && is_int(b)) {
      const bool overflow = __builtin_mul_overflow(int_of(a), int_of(b), &v);
      return int_result(r, overflow, v, line);
    }
    if (is_num(a) && is_num(b)) return Value::real(num_of(a) * num_of(b));
    bad_operands(r, op, a, b, line);
  }
  // "-"
  if (is_int(a) && is_int(b)) {
    const bool overflow = __builtin_sub_overflow(int_of(a), int_of(b), &v);
    return int_result(r, overflow, v, line);
  }
  if (is_num(a) && is_num(b)) return Value::real(num_of(a) - num_of(b));
  bad_operands(r, op, a, b, line);
}

bool contains(Renderer& r, const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Kind::kString:
      if (item.kind != Kind::kString)
        fail(r, line, "'in <string>' requires a string as left operand, not " + type_name(item));
      charge(r, container.text.size() / 64, line);
      return container.text.find(item.text) != std::string::npos;
    case Kind::kList:
      charge(r, container.obj->items.size(), line);
      for (const Value& x : container.obj->items)
        if (py_equal(x, item)) return true;
      return false;
    case Kind::kDict:
    case Kind::kNamespace:
      charge(r, container.obj->entries.size(), line);
      return dict_find(*container.obj, item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      fail(r, line, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare_pair(Renderer& r, const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(r, b, a, line);
  if (op == "not in") return !contains(r, b, a, line);
  bool ok;
  const int c = py_compare(a, b, ok);
  if (!ok) {
    if (a.is_undefined()) undefined_error(r, a, line);
    if (b.is_undefined()) undefined_error(r, b, line);
    fail(r, line,
         "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" +
             type_name(b) + "'");
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

// a < b < c is (a < b) and (b < c), b evaluated once; false at the first pair that fails.
Value compare(Renderer& r, const Node& n) {
  Value left = eval(r, *n.kids[0]);
  for (size_t k = 0; k < n.kw.size(); ++k) {
    Value right = eval(r, *n.kids[k + 1]);
    if (!compare_pair(r, n.kw[k], left, right, n.line)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

// ---- access ----

// Python's slice indices for a sequence of `len` (PySlice_AdjustIndices).
std::vector<size_t> slice_indices(Renderer& r, const Node& n, int64_t len) {
  int64_t idx[3];
  bool given[3];
  for (int k = 0; k < 3; ++k) {
    given[k] = false;
    if (!n.kids[k + 1]) continue;
    const Value v = eval(r, *n.kids[k + 1]);
    if (v.kind == Kind::kNone) continue;
    if (!is_int(v)) fail(r, n.line, "slice indices must be integers or None, not " + type_name(v));
    idx[k] = int_of(v);
    given[k] = true;
  }
  const int64_t step = given[2] ? idx[2] : 1;
  if (step == 0) fail(r, n.line, "slice step cannot be zero");
  auto adjust = [&](int k, int64_t dflt) {
    if (!given[k]) return dflt;
    int64_t i = idx[k];
    if (i < 0) i = std::max<int64_t>(i + len, step < 0 ? -1 : 0);
    return std::min<int64_t>(i, step < 0 ? len - 1 : len);
  };
  const int64_t start = adjust(0, step < 0 ? len - 1 : 0), stop = adjust(1, step < 0 ? -1 : len);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(size_t(i));
  charge(r, out.size(), n.line);
  return out;
}

Value slice(Renderer& r, const Node& n) {
  const Value v = eval(r, *n.kids[0]);
  if (v.kind == Kind::kString) {
    const std::vector<size_t> at = char_offsets(v.text);
    std::string s;
    for (size_t i : slice_indices(r, n, int64_t(at.size())))
      s.append(v.text, at[i], (i + 1 < at.size() ? at[i + 1] : v.text.size()) - at[i]);
    return Value::string(std::move(s));
  }
  if (v.kind == Kind::kList && !is_iterator(v)) {
    std::vector<Value> xs;
    for (size_t i : slice_indices(r, n, int64_t(v.obj->items.size())))
      xs.push_back(v.obj->items[i]);
    return make_list(std::move(xs), v.obj->tuple);
  }
  if (v.is_undefined()) undefined_error(r, v, n.line);
  return Value::undefined("'" + type_name(v) + " object' cannot be sliced");
}

Value call(Renderer& r, const Node& n) {
  Args args;
  const size_t npos = n.kids.size() - 1 - n.kw.size();
  auto eval_args = [&] {
    for (size_t k = 1; k < n.kids.size(); ++k) {
      Value v = eval(r, *n.kids[k]);
      if (k <= npos) {
        args.pos.push_back(std::move(v));
      } else {
        args.kw.emplace_back(n.kw[k - 1 - npos], std::move(v));
      }
    }
  };
  const Node& callee = *n.kids[0];
  if (callee.kind == NodeKind::kAttr) {  // a method of a str, dict or list
    const Value subject = eval(r, *callee.kids[0]);
    if (Builtin method = find_method(subject, callee.name)) {
      eval_args();
      return method(r, subject, args, n.line);
    }
    const Value fn = get_attr(r, subject, callee.name, n.line);
    eval_args();
    return call_value(r, fn, args, n.line);
  }
  const Value fn = eval(r, callee);
  eval_args();
  return call_value(r, fn, args, n.line);
}

// A filter or test node: the subject, then the arguments.
Value apply(Renderer& r, const Node& n, const Value& subject) {
  Args args;
  const size_t npos = n.kids.size() - 1 - n.kw.size();
  for (size_t k = 1; k < n.kids.size(); ++k) {
    Value v = eval(r, *n.kids[k]);
    if (k <= npos) {
      args.pos.push_back(std::move(v));
    } else {
      args.kw.emplace_back(n.kw[k - 1 - npos], std::move(v));
    }
  }
  if (n.kind == NodeKind::kFilter) return apply_filter(r, n.name, subject, args, n.line);
  return Value::boolean(apply_test(r, n.name, subject, args, n.line) != n.negated);
}

Value make_container(Renderer& r, const Node& n) {
  check_items(r, n.kids.size(), n.line);
  if (n.kind != NodeKind::kDict) {
    std::vector<Value> xs;
    for (const NodePtr& k : n.kids) xs.push_back(eval(r, *k));
    return make_list(std::move(xs), n.kind == NodeKind::kTuple);
  }
  std::vector<std::pair<Value, Value>> es;
  for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
    Value key = eval(r, *n.kids[k]), v = eval(r, *n.kids[k + 1]);
    if (key.kind == Kind::kList || key.kind == Kind::kDict || key.kind == Kind::kNamespace ||
        key.kind == Kind::kUndefined)
      fail(r, n.line, "unhashable type: '" + type_name(key) + "'");
    auto same = [&](const auto& e) { return py_equal(e.first, key); };
    auto it = std::find_if(es.begin(), es.end(), same);
    if (it != es.end()) {
      it->second = std::move(v);
    } else {
      es.emplace_back(std::move(key), std::move(v));
    }
  }
  return make_dict(std::move(es));
}

Value eval_inner(Renderer& r, const Node& n) {
  switch (n.kind) {
    case NodeKind::kLiteral:
      return n.value;
    case NodeKind::kName:
      return lookup(r, n.name);
    case NodeKind::kList:
    case NodeKind::kTuple:
    case NodeKind::kDict:
      return make_container(r, n);
    case NodeKind::kAttr:
      return get_attr(r, eval(r, *n.kids[0]), n.name, n.line);
    case NodeKind::kItem:
      return get_item(r, eval(r, *n.kids[0]), eval(r, *n.kids[1]), n.line);
    case NodeKind::kSlice:
      return slice(r, n);
    case NodeKind::kCall:
      return call(r, n);
    case NodeKind::kFilter:
    case NodeKind::kTest:
      return apply(r, n, eval(r, *n.kids[0]));
    case NodeKind::kNot:
      return Value::boolean(!truthy(eval(r, *n.kids[0])));
    case NodeKind::kAnd: {
      Value a = eval(r, *n.kids[0]);
      return truthy(a) ? eval(r, *n.kids[1]) : a;
    }
    case NodeKind::kOr: {
      Value a = eval(r, *n.kids[0]);
      return truthy(a) ? a : eval(r, *n.kids[1]);
    }
    case NodeKind::kCompare:
      return compare(r, n);
    case NodeKind::kCond:
      if (truthy(eval(r, *n.kids[0]))) return eval(r, *n.kids[1]);
      return n.kids[2] ? eval(r, *n.kids[2]) : Value::undefined("the `if` expression had no else");
    case NodeKind::kConcat: {
      const std::string a = py_str(eval(r, *n.kids[0])), b = py_str(eval(r, *n.kids[1]));
      check_size(r, a.size() + b.size(), n.line);
      charge(r, (a.size() + b.size()) / 64, n.line);
      return Value::string(a + b);
    }
    case NodeKind::kBinary:
      return binary(r, n.name, eval(r, *n.kids[0]), eval(r, *n.kids[1]), n.line);
    case NodeKind::kNeg:
    case NodeKind::kPos: {
      Value v = eval(r, *n.kids[0]);
      if (!is_num(v)) {
        if (v.is_undefined()) undefined_error(r, v, n.line);
        fail(r, n.line,
             "bad operand type for unary " + std::string(n.kind == NodeKind::kNeg ? "-" : "+") +
                 ": '" + type_name(v) + "'");
      }
      if (n.kind == NodeKind::kPos) return v.kind == Kind::kBool ? Value::integer(v.b) : v;
      if (v.kind == Kind::kFloat) return Value::real(-v.f);
      return binary(r, "-", Value::integer(0), v, n.line);
    }
    default:
      fail(r, n.line, "internal error: a statement evaluated as an expression");
  }
}

Value eval(Renderer& r, const Node& n) {
  charge(r, 1, n.line);
  Value v = eval_inner(r, n);
  check_value_depth(r, v, n.line);
  return v;
}

// ---- statements ----

void assign(Renderer& r, const std::vector<std::string>& targets, const Value& v, int line) {
  if (targets.size() == 1) {
    r.scope->vars[targets[0]] = v;
    return;
  }
  const std::vector<Value> xs = iterate(r, v, line);
  if (xs.size() != targets.size())
    fail(r, line,
         (xs.size() > targets.size() ? "too many" : "not enough") +
             std::string(" values to unpack (expected ") + std::to_string(targets.size()) +
             ", got " + std::to_string(xs.size()) + ")");
  for (size_t k = 0; k < xs.size(); ++k) r.scope->vars[targets[k]] = xs[k];
}

void set_attr(Renderer& r, const Node& n) {
  const Value ns = lookup(r, n.name);
  if (ns.kind != Kind::kNamespace)
    fail(r, n.line,
         "`{% set " + n.name + "." + n.targets[0] + " %}`: " +
             (ns.is_undefined()
                  ? "'" + n.name + "' is undefined"
                  : "can only set attributes of a namespace(), not of a " + type_name(ns)));
  Value v = eval(r, *n.kids[0]);
  if (v.kind == Kind::kNamespace || (v.obj && v.obj->holds_namespace))
    fail(r, n.line, "a namespace cannot hold a namespace (it could then hold itself)");
  Object& o = *ns.obj;
  o.depth = std::max(o.depth, depth_of(v) + 1);
  const Value key = Value::string(n.targets[0]);
  for (auto& e : o.entries)
    if (py_equal(e.first, key)) return void(e.second = std::move(v));
  check_items(r, o.entries.size() + 1, n.line);
  o.entries.emplace_back(key, std::move(v));
}

Value loop_object(Renderer& r, const std::vector<Value>& xs, size_t i) {
  const int64_t len = int64_t(xs.size()), idx = int64_t(i);
  std::vector<std::pair<std::string, Value>> es = {
      {"index", Value::integer(idx + 1)},
      {"index0", Value::integer(idx)},
      {"revindex", Value::integer(len - idx)},
      {"revindex0", Value::integer(len - idx - 1)},
      {"first", Value::boolean(idx == 0)},
      {"last", Value::boolean(idx == len - 1)},
      {"length", Value::integer(len)},
      {"depth", Value::integer(1)},
      {"depth0", Value::integer(0)},
      {"previtem", i > 0 ? xs[i - 1] : Value::undefined("there is no previous item")},
      {"nextitem", i + 1 < xs.size() ? xs[i + 1] : Value::undefined("there is no next item")}};
  es.emplace_back("cycle", make_callable("loop.cycle", [i](Renderer& rr, Args& a, int line) {
                    if (a.pos.empty()) fail(rr, line, "loop.cycle() needs at least one value");
                    return a.pos[i % a.pos.size()];
                  }));
  return Value::dict(std::move(es));
}

// The items a `{% for %}` visits: the iterable's, kept where the `if` filter holds.
std::vector<Value> loop_items(Renderer& r, const Node& n) {
  std::vector<Value> xs = iterate(r, eval(r, *n.kids[0]), n.line);
  if (!n.kids[1]) return xs;
  std::vector<Value> kept;
  Frame f{{}, r.scope};
  Frame* outer = r.scope;
  r.scope = &f;
  try {
    for (const Value& x : xs) {
      charge(r, 1, n.line);
      assign(r, n.targets, x, n.line);
      if (truthy(eval(r, *n.kids[1]))) kept.push_back(x);
    }
  } catch (...) {
    r.scope = outer;
    throw;
  }
  r.scope = outer;
  return kept;
}

void exec_for(Renderer& r, const Node& n) {
  const std::vector<Value> xs = loop_items(r, n);
  Frame* outer = r.scope;
  try {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (++r.iterations > r.t.limits.max_loop_iterations)
        fail(r, n.line,
             "loops ran more than " + std::to_string(r.t.limits.max_loop_iterations) +
                 " iterations (the cap on loops)");
      Frame f{{}, outer};
      r.scope = &f;
      assign(r, n.targets, xs[i], n.line);
      f.vars["loop"] = loop_object(r, xs, i);
      const Flow flow = exec(r, n.body);
      r.scope = outer;
      if (flow == Flow::kBreak) break;
    }
  } catch (...) {
    r.scope = outer;
    throw;
  }
  if (xs.empty()) exec(r, n.orelse);
}

Value call_macro(Renderer& r, const Node& m, Args& args, int line) {
  if (r.call_depth >= r.t.limits.max_call_depth)
    fail(r, line,
         "macro calls nested deeper than " + std::to_string(r.t.limits.max_call_depth) +
             " (the cap on recursion)");
  if (args.pos.size() > m.kw.size())
    fail(r, line,
         "macro '" + m.name + "' takes not more than " + std::to_string(m.kw.size()) +
             " argument(s)");
  Frame f{{}, &r.root};
  for (size_t k = 0; k < args.pos.size(); ++k) f.vars[m.kw[k]] = args.pos[k];
  for (auto& [name, v] : args.kw) {
    if (std::find(m.kw.begin(), m.kw.end(), name) == m.kw.end())
      fail(r, line, "macro '" + m.name + "' takes no keyword argument '" + name + "'");
    f.vars[name] = v;
  }
  Frame* outer = r.scope;
  r.scope = &f;
  ++r.call_depth;
  std::string text;
  try {
    for (size_t k = 0; k < m.kw.size(); ++k) {  // defaults, in the macro's scope
      if (f.vars.count(m.kw[k])) continue;
      f.vars[m.kw[k]] =
          m.kids[k] ? eval(r, *m.kids[k]) : Value::undefined("'" + m.kw[k] + "' is undefined");
    }
    text = capture(r, m.body);
  } catch (...) {
    r.scope = outer;
    --r.call_depth;
    throw;
  }
  r.scope = outer;
  --r.call_depth;
  return Value::string(std::move(text));
}

Flow exec_one(Renderer& r, const Node& n) {
  charge(r, 1, n.line);
  switch (n.kind) {
    case NodeKind::kText:
      emit(r, n.value.text, n.line);
      break;
    case NodeKind::kOutput:
      emit(r, py_str(eval(r, *n.kids[0])), n.line);
      break;
    case NodeKind::kIf:
      return exec(r, truthy(eval(r, *n.kids[0])) ? n.body : n.orelse);
    case NodeKind::kFor:
      exec_for(r, n);
      break;
    case NodeKind::kSet:
      assign(r, n.targets, eval(r, *n.kids[0]), n.line);
      break;
    case NodeKind::kSetAttr:
      set_attr(r, n);
      break;
    case NodeKind::kSetBlock:
      r.scope->vars[n.targets[0]] = Value::string(capture(r, n.body));
      break;
    case NodeKind::kMacro: {
      const Node* m = &n;
      r.scope->vars[n.name] = make_callable(
          n.name, [m](Renderer& rr, Args& a, int line) { return call_macro(rr, *m, a, line); });
      break;
    }
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
    case NodeKind::kGeneration:
      return exec(r, n.body);
    case NodeKind::kFilterBlock:
      emit(r, py_str(apply(r, *n.kids[0], Value::string(capture(r, n.body)))), n.line);
      break;
    default:
      fail(r, n.line, "internal error: an expression executed as a statement");
  }
  return Flow::kNormal;
}

Flow exec(Renderer& r, const std::vector<NodePtr>& body) {
  for (const NodePtr& n : body) {
    const Flow flow = exec_one(r, *n);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

}  // namespace

std::vector<Value> iterate(Renderer& r, const Value& v, int line) {
  switch (v.kind) {
    case Kind::kList:
      charge(r, v.obj->items.size(), line);
      return v.obj->items;
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& e : v.obj->entries) keys.push_back(e.first);
      charge(r, keys.size(), line);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      const std::vector<size_t> at = char_offsets(v.text);
      for (size_t i = 0; i < at.size(); ++i)
        chars.push_back(Value::string(
            v.text.substr(at[i], (i + 1 < at.size() ? at[i + 1] : v.text.size()) - at[i])));
      charge(r, chars.size(), line);
      return chars;
    }
    case Kind::kUndefined:
      return {};
    default:
      fail(r, line, "'" + type_name(v) + "' object is not iterable");
  }
}

Value call_value(Renderer& r, const Value& callee, Args& args, int line) {
  if (callee.kind == Kind::kCallable) return callee.obj->call(r, args, line);
  if (callee.is_undefined()) undefined_error(r, callee, line);
  fail(r, line, "'" + type_name(callee) + "' object is not callable");
}

Value get_attr(Renderer& r, const Value& v, const std::string& attr, int line) {
  if (v.is_undefined()) undefined_error(r, v, line);
  if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) {
    if (const Value* x = dict_find(*v.obj, Value::string(attr))) return *x;
  }
  return Value::undefined(
      "'" + (v.kind == Kind::kNamespace ? std::string("Namespace") : type_name(v) + " object") +
      "' has no attribute '" + attr + "'");
}

Value get_item(Renderer& r, const Value& v, const Value& key, int line) {
  if (v.is_undefined()) undefined_error(r, v, line);
  if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) {
    if (const Value* x = dict_find(*v.obj, key)) return *x;
  } else if (((v.kind == Kind::kList && !is_iterator(v)) || v.kind == Kind::kString) &&
             is_int(key)) {
    const bool str = v.kind == Kind::kString;
    const std::vector<size_t> at = str ? char_offsets(v.text) : std::vector<size_t>{};
    const int64_t len = int64_t(str ? at.size() : v.obj->items.size());
    int64_t i = int_of(key);
    if (i < 0) i += len;
    if (i >= 0 && i < len) {
      if (!str) return v.obj->items[size_t(i)];
      const size_t end = size_t(i) + 1 < at.size() ? at[size_t(i) + 1] : v.text.size();
      return Value::string(v.text.substr(at[size_t(i)], end - at[size_t(i)]));
    }
  } else if (key.kind == Kind::kString) {
    return get_attr(r, v, key.text, line);
  }
  return Value::undefined("'" + type_name(v) + " object' has no attribute " + py_repr(key));
}

Template Template::parse(const std::string& source, const std::string& origin,
                         const Limits& limits) {
  auto impl = std::make_shared<TemplateImpl>();
  impl->origin = origin;
  impl->limits = limits;
  parse_template(source, *impl);
  return Template(std::move(impl));
}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& variables) const {
  Renderer r(*impl_);
  for (auto& [name, v] : builtin_globals()) r.globals.vars[name] = std::move(v);
  for (const auto& [name, v] : variables) r.globals.vars[name] = v;
  exec(r, impl_->body);
  return std::move(r.out);
}

bool Template::has_generation() const { return impl_->has_generation; }
const std::string& Template::origin() const { return impl_->origin; }

}  // namespace fsdp::data::jinja
