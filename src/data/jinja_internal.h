// What the parts of the Jinja engine share (src/data/jinja_*.cpp; the API is jinja.h): the
// objects behind Value (lists, dicts, namespaces, callables), the syntax tree the parser builds and
// the renderer walks, and the Python semantics of values (str, repr, JSON, truth, equality, order)
// that the renderer and the built-in filters both use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja.h"

namespace fsdp::data::jinja {

struct Renderer;

// Positional and keyword arguments of a call, filter or test (the filter's or test's subject not
// included).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Lists (and tuples), dicts, namespaces and callables. `depth` is how deeply containers nest in
// this one (1 for a list of scalars) and `holds_namespace` whether one is inside: both fixed when
// the object is built, which the caps on nesting and the no-namespace-in-a-namespace rule use.
struct Object {
  int depth = 1;
  bool holds_namespace = false;
  bool tuple = false;  // a list that repr() writes as (a, b)
  // An iterator, as the generators jinja2's map, select, items, unique and reverse return: true
  // even when empty, iterable, without len() or [] (`name`: its Python type).
  bool lazy = false;
  std::vector<Value> items;                               // kList
  std::vector<std::pair<Value, Value>> entries;           // kDict, kNamespace: insertion order
  std::string name;                                       // kCallable: for messages
  std::function<Value(Renderer&, Args&, int line)> call;  // kCallable
};

// Builds a list or dict value, computing depth and holds_namespace.
Value make_list(std::vector<Value> items, bool tuple = false);
Value make_dict(std::vector<std::pair<Value, Value>> entries);
Value make_iterator(std::vector<Value> items, std::string type = "generator");
bool is_iterator(const Value& v);
Value make_callable(std::string name, std::function<Value(Renderer&, Args&, int)> fn);
int depth_of(const Value& v);

// Python's semantics. `depth` guards the recursion (values nest boundedly, see jinja.h).
bool truthy(const Value& v);
std::string type_name(const Value& v);  // Python's: 'str', 'int', 'list', 'dict', ...
bool py_equal(const Value& a, const Value& b, int depth = 0);
// a < b: -1, 0 or 1 as Python orders numbers, strings and lists; nullopt-like false in `ok` when
// the two cannot be ordered (a TypeError in Python).
int py_compare(const Value& a, const Value& b, bool& ok, int depth = 0);
std::string py_str(const Value& v);  // str(v): what {{ v }} writes
std::string py_repr(const Value& v, int depth = 0);
std::string float_repr(double f);
// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=False); false in `ok` for
// a value JSON cannot hold (Undefined, a namespace, a callable).
std::string to_json(const Value& v, int indent, bool& ok, int depth = 0);

// Dict lookup by Python equality; nullptr when absent.
const Value* dict_find(const Object& dict, const Value& key);

// UTF-8 as Python's str sees it: code points.
std::vector<size_t> char_offsets(const std::string& s);  // byte offset of each code point
size_t char_count(const std::string& s);
bool is_py_space(uint32_t cp);

// ---- syntax tree ----

enum class NodeKind {
  // expressions
  kLiteral,
  kName,
  kList,
  kTuple,
  kDict,
  kAttr,
  kItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNeg,
  kPos,
  kNot,
  kBinary,
  kAnd,
  kOr,
  kCompare,
  kCond,
  kConcat,
  // statements
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetAttr,
  kSetBlock,
  kMacro,
  kBreak,
  kContinue,
  kGeneration,
  kFilterBlock
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// One node. Expressions: `kids` are the operands (kCall, kFilter, kTest: the callee or subject
// first, then the arguments, the last `kw.size()` of them keyword arguments named by `kw`).
// Statements: `kids` are the expressions they evaluate, `body` and `orelse` their blocks.
struct Node {
  NodeKind kind;
  int line = 0;
  int height = 0;        // expressions: the longest chain of operands below (parse-time cap)
  std::string name;      // variable, attribute, filter, test, operator, macro, namespace
  Value value;           // kLiteral
  bool negated = false;  // kTest: `is not`
  std::vector<NodePtr> kids;
  std::vector<std::string> kw;       // keyword argument names; kMacro: parameter names
  std::vector<std::string> targets;  // kFor, kSet: the names assigned (several: unpacking)
  std::vector<NodePtr> body, orelse;
};

struct TemplateImpl {
  std::string origin;
  Limits limits;
  std::vector<NodePtr> body;
  bool has_generation = false;
};

// The parser (jinja_parse.cpp).
void parse_template(const std::string& source, TemplateImpl& out);

// The built-ins (jinja_builtins.cpp): a filter, a test, a method of a str, dict or list value
// (nullptr: none by that name), and the global functions.
using Builtin = Value (*)(Renderer&, const Value& subject, Args& args, int line);
Builtin find_filter(const std::string& name);
Builtin find_test(const std::string& name);
Builtin find_method(const Value& subject, const std::string& name);
std::vector<std::pair<std::string, Value>> builtin_globals();

// The renderer's services the built-ins use (jinja_render.cpp).
[[noreturn]] void fail(Renderer& r, int line, const std::string& message);
// raise_exception(message): an Error whose raised() is true.
[[noreturn]] void raise_from_template(Renderer& r, int line, const std::string& message);
void charge(Renderer& r, uint64_t steps, int line);    // work done; a cap
void check_size(Renderer& r, size_t bytes, int line);  // a string's length against the cap
void check_items(Renderer& r, size_t n, int line);     // a container's length against the cap
const Limits& limits_of(const Renderer& r);
// The elements `for x in v` visits (a dict's keys, a string's characters); an error for a value
// that cannot be iterated.
std::vector<Value> iterate(Renderer& r, const Value& v, int line);
// Calls a callable value (a macro, a global) with `args`.
Value call_value(Renderer& r, const Value& callee, Args& args, int line);
// Applies a test by name (select, reject, selectattr use it).
bool apply_test(Renderer& r, const std::string& name, const Value& v, Args& args, int line);
// Applies a filter by name (map uses it).
Value apply_filter(Renderer& r, const std::string& name, const Value& v, Args& args, int line);
// v.attr / v[key] as jinja2's getattr and getitem: Undefined where absent; an error on Undefined.
Value get_attr(Renderer& r, const Value& v, const std::string& attr, int line);
Value get_item(Renderer& r, const Value& v, const Value& key, int line);

}  // namespace fsdp::data::jinja
