// A Jinja subset, enough for the chat templates of Hugging Face models: the language as jinja2
// 3.1 reads and renders it in transformers' environment (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loopcontrols extension, the `{% generation %}` tag, Python's
// semantics for values). What the subset holds and what it refuses is in docs/chat.md; a construct
// outside it is refused when the template is parsed, naming the construct and the line.
//
// Templates come from model folders, that is from outside: every resource a template can make the
// renderer spend is capped (Limits), and reaching a cap is a jinja::Error naming it, never a crash,
// a hang or an allocation without bound. Values are immutable once built (as in the immutable
// sandbox) except namespaces, which may not hold another namespace, so values form no cycles and
// nest no deeper than twice Limits::max_value_depth.
//
// Thread-safety: a parsed Template is immutable; render() may run on several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::data::jinja {

// Every failure: a parse error, a refused construct, an error while rendering (a type error, an
// undefined value used, a cap reached), or raise_exception() called by the template (then
// raised() is true and message() is the template's own text).
class Error : public std::runtime_error {
 public:
  Error(const std::string& origin, int line, const std::string& message, bool raised = false);
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_;
  bool raised_;
};

// The caps (docs/hardening.md); far above what any published chat template needs.
struct Limits {
  size_t max_source_bytes = size_t{1} << 20;   // the template's text
  int max_parse_depth = 64;                    // nested blocks and expressions
  int max_call_depth = 32;                     // macro calls inside macro calls
  size_t max_output_bytes = size_t{16} << 20;  // the rendering, and any one string value
  uint64_t max_loop_iterations = 1'000'000;    // all loops of a rendering together
  uint64_t max_steps = 20'000'000;             // expression and statement evaluations, and work
  size_t max_items = 1'000'000;                // elements of one list, dict or range()
  int max_value_depth = 128;                   // lists and dicts nested in each other
};

struct Object;  // a list, tuple, dict, namespace or callable: shared, immutable but namespaces

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable
};

// A value as Python sees it. Undefined is jinja2's default Undefined: it renders as "", is false,
// iterates as empty and equals only another Undefined; any other use (attribute, subscript,
// arithmetic, order) is an error naming what was undefined (`text` holds the hint).
struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string text;             // kString: the UTF-8 text; kUndefined: what was undefined
  std::shared_ptr<Object> obj;  // kList, kDict, kNamespace, kCallable

  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value real(double v);
  static Value string(std::string v);
  // Lists and dicts for the caller's variables (messages, tools, extra values); any depth.
  static Value list(std::vector<Value> items);
  static Value dict(std::vector<std::pair<std::string, Value>> items);

  bool is_undefined() const { return kind == Kind::kUndefined; }
};

struct TemplateImpl;

class Template {
 public:
  // Parses `source`; `origin` names it in errors ("chat template", a file's path). Throws Error
  // for a syntax error, a construct outside the subset, or a cap (size, nesting).
  static Template parse(const std::string& source, const std::string& origin = "template",
                        const Limits& limits = {});

  // Renders with `variables` as the template's globals (beside raise_exception, strftime_now,
  // namespace, range and dict, which a variable of the same name hides).
  std::string render(const std::vector<std::pair<std::string, Value>>& variables) const;

  // Whether the template holds a `{% generation %}` block.
  bool has_generation() const;
  const std::string& origin() const;

 private:
  explicit Template(std::shared_ptr<const TemplateImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TemplateImpl> impl_;
};

}  // namespace fsdp::data::jinja
