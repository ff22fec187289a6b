// The Jinja subset's lexer and parser: template text to the syntax tree of jinja_internal.h.
// The lexer applies jinja2's whitespace rules as transformers configures them (trim_blocks: the
// newline after a block or comment tag goes; lstrip_blocks: spaces and tabs before one at the start
// of a line go; `-` strips all whitespace on its side, `+` keeps it), normalises newlines and drops
// one trailing newline (keep_trailing_newline=False). The parser follows jinja2's grammar and
// precedence (parser.py); a construct outside the subset is refused here, naming it and its line,
// so that a template is either fully understood or not used at all.
#include <cstring>
#include <set>

#include "data/jinja_internal.h"
#include "data/utf8.h"

namespace fsdp::data::jinja {
namespace {

enum class Tok {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type;
  std::string text;  // kData, kName, kOp: the text; kString: the unescaped value
  int line;
  int64_t i = 0;
  double f = 0;
};

// Newlines as jinja2 sees them (\r\n and \r become \n), one trailing newline dropped.
std::string normalise(const std::string& src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += src[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Whitespace inside tags (strchr would also find the NUL terminator, taking a NUL byte for it).
bool is_tag_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.rstrip() and regex \s* (Unicode whitespace), which jinja2 strips with.
size_t py_rstrip_end(const std::string& s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    i = c.end;
    if (c.cp < 0 || !is_py_space(uint32_t(c.cp))) end = i;
  }
  return end;
}
size_t py_space_end(const std::string& s, size_t p) {
  while (p < s.size()) {
    const Utf8Char c = decode_utf8(s, p);
    if (c.cp < 0 || !is_py_space(uint32_t(c.cp))) break;
    p = c.end;
  }
  return p;
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& origin) : s_(normalise(src)), origin_(origin) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) lex_data_and_tag();
    out_.push_back({Tok::kEof, "", line_});
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& m) const { throw Error(origin_, line_, m); }

  void advance_to(size_t p) {
    for (size_t i = pos_; i < p; ++i) line_ += s_[i] == '\n';
    pos_ = p;
  }

  // Text up to the next tag, with the whitespace rules, then the tag.
  void lex_data_and_tag() {
    size_t start = s_.size();
    for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, s_.find(open, pos_));
    const bool line_starting = pos_ == 0 || s_[pos_ - 1] == '\n';
    std::string text = s_.substr(pos_, start - pos_);
    if (start < s_.size()) {
      const char kind = s_[start + 1], sign = start + 2 < s_.size() ? s_[start + 2] : '\0';
      if (sign == '-') {
        text.erase(py_rstrip_end(text));
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') + 1;  // 0 when there is no newline
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.erase(l_pos);
      }
    }
    if (!text.empty()) out_.push_back({Tok::kData, text, line_});
    advance_to(start);
    if (pos_ >= s_.size()) return;
    const char kind = s_[pos_ + 1];
    if (kind == '#') return lex_comment();
    out_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
    advance_to(pos_ + 2);
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) advance_to(pos_ + 1);
    lex_tag(kind == '{' ? "}}" : "%}");
  }

  // After a block or comment: `-` strips all whitespace, `+` nothing, else one newline goes.
  void after_tag_end(char sign, bool block) {
    if (sign == '-') {
      advance_to(py_space_end(s_, pos_));
    } else if (block && sign != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
  }

  void lex_comment() {
    const size_t end = s_.find("#}", pos_ + 2);
    if (end == std::string::npos) fail("a comment `{#` is never closed with `#}`");
    const char sign = end > pos_ + 2 ? s_[end - 1] : '\0';
    advance_to(end + 2);
    after_tag_end(sign, true);
  }

  // Tokens of an expression or statement, up to `close` (with its whitespace sign).
  // As jinja2's lexer balances brackets, `}}` inside open brackets is two braces, not the end
  // ({{ {'a': {'b': 1}} }}).
  void lex_tag(const std::string& close) {
    const bool block = close == "%}";
    if (block) check_raw();
    int open = 0;
    for (;;) {
      while (pos_ < s_.size() && is_tag_space(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) fail("a tag is never closed with `" + close + "`");
      for (char sign : {'-', '+', '\0'}) {
        if (open > 0) break;
        if (sign == '+' && !block) continue;  // `+` keeps whitespace before a block's end only
        const std::string end = sign ? std::string(1, sign) + close : close;
        if (s_.compare(pos_, end.size(), end) != 0) continue;
        out_.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_});
        advance_to(pos_ + end.size());
        return after_tag_end(sign, block);
      }
      lex_token();
      const std::string& op = out_.back().type == Tok::kOp ? out_.back().text : "";
      if (op == "(" || op == "[" || op == "{") ++open;
      if ((op == ")" || op == "]" || op == "}") && open > 0) --open;
    }
  }

  // `{% raw %}` would need its own lexing; no chat template uses it.
  void check_raw() {
    size_t p = pos_;
    while (p < s_.size() && is_tag_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") == 0 &&
        (p + 3 >= s_.size() || !std::isalnum((unsigned char)s_[p + 3])))
      fail("`{% raw %}` is not supported");
  }

  void lex_token() {
    const unsigned char c = s_[pos_];
    if (std::isalpha(c) || c == '_') return lex_name();
    if (std::isdigit(c)) return lex_number();
    if (c == '\'' || c == '"') return lex_string();
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                 "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                 "]",  "{",  "}",  ",",  ".",  ":",  "|"};
    for (const char* op : kOps) {
      if (s_.compare(pos_, std::strlen(op), op) == 0) {
        out_.push_back({Tok::kOp, op, line_});
        return advance_to(pos_ + std::strlen(op));
      }
    }
    fail(std::string("unexpected character '") + static_cast<char>(c) + "' in a tag");
  }

  void lex_name() {
    size_t p = pos_;
    while (p < s_.size() && (std::isalnum((unsigned char)s_[p]) || s_[p] == '_')) ++p;
    out_.push_back({Tok::kName, s_.substr(pos_, p - pos_), line_});
    advance_to(p);
  }

  size_t digits(size_t p) const {  // \d+(_\d+)*
    while (p < s_.size() &&
           (std::isdigit((unsigned char)s_[p]) ||
            (s_[p] == '_' && p + 1 < s_.size() && std::isdigit((unsigned char)s_[p + 1]))))
      ++p;
    return p;
  }

  void lex_number() {
    size_t p = digits(pos_);
    bool is_float = false;
    if (p + 1 < s_.size() && s_[p] == '.' && std::isdigit((unsigned char)s_[p + 1])) {
      p = digits(p + 1);
      is_float = true;
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && std::isdigit((unsigned char)s_[q])) {
        p = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < p; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t{is_float ? Tok::kFloat : Tok::kInt, text, line_};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.i = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("the integer " + text.substr(0, 40) + " is too large");
    }
    out_.push_back(t);
    advance_to(p);
  }

  void lex_string() {
    const char q = s_[pos_];
    const int line = line_;
    std::string v;
    size_t p = pos_ + 1;
    for (;; ++p) {
      if (p >= s_.size()) fail("a string is never closed");
      if (s_[p] == q) break;
      if (s_[p] == '\\' && p + 1 < s_.size()) {
        p = unescape(p + 1, v);
      } else {
        v += s_[p];
      }
    }
    out_.push_back({Tok::kString, v, line});
    advance_to(p + 1);
  }

  // Python's unicode-escape after the backslash at p-1; returns the last byte consumed.
  size_t unescape(size_t p, std::string& v) {
    const char c = s_[p];
    static const char* kSimple = "n\nt\tr\r\\\\'\'\"\"a\ab\bf\fv\v";
    for (const char* e = kSimple; *e; e += 2)
      if (c == e[0]) return v += e[1], p;
    if (c == '\n') return p;  // a backslash-newline continues the line
    const int hex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (hex) {
      uint32_t cp = 0;
      for (int k = 1; k <= hex; ++k) {
        if (p + k >= s_.size() || !std::isxdigit((unsigned char)s_[p + k]))
          fail(std::string("a truncated \\") + c + " escape in a string");
        cp = cp * 16 + std::stoi(std::string(1, s_[p + k]), nullptr, 16);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("an invalid escape in a string");
      append_utf8(v, cp);
      return p + hex;
    }
    if (c >= '0' && c <= '7') {
      uint32_t cp = 0;
      size_t k = p;
      for (; k < p + 3 && k < s_.size() && s_[k] >= '0' && s_[k] <= '7'; ++k)
        cp = cp * 8 + (s_[k] - '0');
      append_utf8(v, cp);
      return k - 1;
    }
    v += '\\';  // unknown escapes stay as they are, as in Python
    v += c;
    return p;
  }

  std::string s_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

// Statements jinja2 has that the subset refuses, and the end tags that close a block.
const std::set<std::string> kRefused = {
    "include",  "extends",    "block",   "import",        "from",      "call",
    "with",     "autoescape", "do",      "trans",         "pluralize", "raw",
    "endblock", "endcall",    "endwith", "endautoescape", "endtrans",  "print"};

class Parser {
 public:
  Parser(std::vector<Token> toks, TemplateImpl& t) : toks_(std::move(toks)), t_(t) {}

  std::vector<NodePtr> parse() {
    std::string end;
    auto body = parse_body({}, end);
    return body;
  }

 private:
  // ---- tokens ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  Token next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool accept_op(const char* op) { return is_op(op) ? (next(), true) : false; }
  bool accept_name(const char* n) { return is_name(n) ? (next(), true) : false; }

  [[noreturn]] void fail(const std::string& m, int line = -1) const {
    throw Error(t_.origin, line < 0 ? cur().line : line, m);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kEof:
        return "the end of the template";
      case Tok::kVarEnd:
        return "`}}`";
      case Tok::kBlockEnd:
        return "`%}`";
      case Tok::kString:
        return "a string";
      case Tok::kData:
        return "text";
      default:
        return "`" + t.text + "`";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected `") + op + "`, found " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, found " + describe(cur()));
    return next().text;
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", found " + describe(cur()));
    next();
  }

  // Nesting guard: blocks and expressions deeper than Limits::max_parse_depth are refused.
  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.depth_ > p.t_.limits.max_parse_depth)
        p.fail("nested deeper than " + std::to_string(p.t_.limits.max_parse_depth) +
               " levels (the cap on blocks and expressions)");
    }
    ~Depth() { --p.depth_; }
  };

  NodePtr node(NodeKind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // An expression's operators chain without recursing in the parser (a + b + c ..., x|f|f ...)
  // but the renderer recurses through them: their height is capped too, at twice the nesting cap.
  NodePtr checked(NodePtr n) {
    for (const NodePtr& k : n->kids)
      if (k) n->height = std::max(n->height, k->height + 1);
    if (n->height > 2 * t_.limits.max_parse_depth)
      fail("an expression nested deeper than " + std::to_string(2 * t_.limits.max_parse_depth) +
               " operators (the cap on expressions)",
           n->line);
    return n;
  }

  // ---- statements ----

  // Statements until a block tag named in `ends` (its name is left in `end`, consumed) or the end
  // of the template (only when `ends` is empty).
  std::vector<NodePtr> parse_body(const std::set<std::string>& ends, std::string& end) {
    Depth guard(*this);
    std::vector<NodePtr> body;
    const int start_line = cur().line;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (!ends.empty())
          fail("a block opened at line " + std::to_string(start_line) +
               " is never closed (expected `{% " + *ends.begin() + " %}`)");
        return body;
      }
      if (t.type == Tok::kData) {
        auto n = node(NodeKind::kText, t.line);
        n->value = Value::string(t.text);
        body.push_back(std::move(n));
        next();
      } else if (t.type == Tok::kVarBegin) {
        next();
        auto n = node(NodeKind::kOutput, t.line);
        n->kids.push_back(parse_expression());
        expect(Tok::kVarEnd, "`}}`");
        body.push_back(std::move(n));
      } else {
        next();
        const std::string name = cur().type == Tok::kName ? cur().text : "";
        if (ends.count(name)) {
          end = name;
          next();
          return body;
        }
        body.push_back(parse_statement());
      }
    }
  }

  NodePtr parse_statement() {
    const Token t = cur();
    if (t.type != Tok::kName) fail("expected a statement name after `{%`, found " + describe(t));
    const std::string& n = t.text;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "break" || n == "continue") return parse_loop_control();
    if (n == "generation") return parse_generation();
    if (n == "filter") return parse_filter_block();
    if (kRefused.count(n)) fail("`{% " + n + " %}` is not supported");
    if (n.rfind("end", 0) == 0 || n == "elif" || n == "else")
      fail("unexpected `{% " + n + " %}` (no open block it closes or continues)");
    fail("unknown statement `{% " + n + " %}`");
  }

  void end_tag() { expect(Tok::kBlockEnd, "`%}`"); }

  NodePtr parse_if() {
    auto n = node(NodeKind::kIf, next().line);
    n->kids.push_back(parse_expression(false));  // jinja2: no `x if c` in an if's test
    end_tag();
    std::string end;
    n->body = parse_body({"elif", "else", "endif"}, end);
    if (end == "elif") {
      n->orelse.push_back(parse_if_tail());
    } else if (end == "else") {
      end_tag();
      n->orelse = parse_body({"endif"}, end);
      end_tag();
    } else {
      end_tag();
    }
    return n;
  }

  // An `elif` as an `if` nested in the else branch (the `elif` name already consumed).
  NodePtr parse_if_tail() {
    --pos_;  // back onto `elif`, which parse_if consumes as it would `if`
    return parse_if();
  }

  NodePtr parse_for() {
    auto n = node(NodeKind::kFor, next().line);
    n->targets = parse_targets();
    if (!accept_name("in")) fail("expected `in` in a `{% for %}`, found " + describe(cur()));
    n->kids.push_back(parse_expression(false));
    if (accept_name("if")) {
      n->kids.push_back(parse_expression(false));
    } else {
      n->kids.emplace_back();  // no filter
    }
    if (is_name("recursive")) fail("`{% for ... recursive %}` is not supported");
    end_tag();
    std::string end;
    ++loop_depth_;
    n->body = parse_body({"else", "endfor"}, end);
    --loop_depth_;
    end_tag();
    if (end == "else") {
      n->orelse = parse_body({"endfor"}, end);
      end_tag();
    }
    return n;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do {
      names.push_back(expect_name());
      if (is_op(".")) fail("only names can be assigned here, not attributes");
    } while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_set() {
    const int line = next().line;
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
      auto n = node(NodeKind::kSetAttr, line);
      n->name = next().text;
      next();
      n->targets.push_back(expect_name());
      expect_op("=");
      n->kids.push_back(parse_expression());
      end_tag();
      return n;
    }
    std::vector<std::string> targets = parse_targets();
    if (accept_op("=")) {
      auto n = node(NodeKind::kSet, line);
      n->targets = std::move(targets);
      n->kids.push_back(parse_tuple_or_expression());
      end_tag();
      return n;
    }
    if (targets.size() != 1) fail("a block `{% set %}` assigns one name");
    auto n = node(NodeKind::kSetBlock, line);
    n->targets = std::move(targets);
    if (is_op("|")) fail("a filter on a block `{% set %}` is not supported");
    end_tag();
    std::string end;
    n->body = parse_body({"endset"}, end);
    end_tag();
    return n;
  }

  NodePtr parse_macro() {
    auto n = node(NodeKind::kMacro, next().line);
    n->name = expect_name();
    expect_op("(");
    while (!accept_op(")")) {
      if (!n->kw.empty()) expect_op(",");
      if (is_op(")")) continue;
      n->kw.push_back(expect_name());
      if (accept_op("=")) {
        n->kids.push_back(parse_expression());
      } else if (!n->kids.empty() && n->kids.back()) {
        fail("a macro parameter without a default follows one with a default");
      } else {
        n->kids.emplace_back();
      }
    }
    end_tag();
    std::string end;
    n->body = parse_body({"endmacro"}, end);
    end_tag();
    return n;
  }

  NodePtr parse_loop_control() {
    const Token t = next();
    if (loop_depth_ == 0) fail("`{% " + t.text + " %}` outside a `{% for %}` loop", t.line);
    end_tag();
    return node(t.text == "break" ? NodeKind::kBreak : NodeKind::kContinue, t.line);
  }

  NodePtr parse_generation() {
    auto n = node(NodeKind::kGeneration, next().line);
    end_tag();
    std::string end;
    n->body = parse_body({"endgeneration"}, end);
    end_tag();
    t_.has_generation = true;
    return n;
  }

  // {% filter name(args) %}...{% endfilter %}: the body's text through the filter.
  NodePtr parse_filter_block() {
    auto n = node(NodeKind::kFilterBlock, next().line);
    auto subject = node(NodeKind::kLiteral, n->line);
    subject->value = Value::string("");
    n->kids.push_back(parse_filter(std::move(subject)));
    end_tag();
    std::string end;
    n->body = parse_body({"endfilter"}, end);
    end_tag();
    return n;
  }

  // ---- expressions (jinja2's parser.py, level by level) ----

  // `a, b` at the top of a `{% set %}`: a tuple.
  NodePtr parse_tuple_or_expression() {
    auto first = parse_expression();
    if (!is_op(",")) return first;
    auto n = node(NodeKind::kTuple, first->line);
    n->kids.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().type == Tok::kBlockEnd) break;
      n->kids.push_back(parse_expression());
    }
    return n;
  }

  NodePtr parse_expression(bool with_condexpr = true) {
    Depth guard(*this);
    auto expr = parse_or();
    if (!with_condexpr) return expr;
    while (is_name("if")) {
      auto n = node(NodeKind::kCond, next().line);
      auto cond = parse_or();
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(expr));
      if (accept_name("else")) {
        n->kids.push_back(parse_expression());
      } else {
        n->kids.emplace_back();
      }
      expr = checked(std::move(n));
    }
    return expr;
  }

  NodePtr binary(NodeKind k, std::string op, NodePtr a, NodePtr b, int line) {
    auto n = node(k, line);
    n->name = std::move(op);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return checked(std::move(n));
  }

  NodePtr parse_or() {
    auto left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = binary(NodeKind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  NodePtr parse_and() {
    auto left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = binary(NodeKind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  NodePtr parse_not() {
    if (is_name("not")) {
      Depth guard(*this);
      auto n = node(NodeKind::kNot, next().line);
      n->kids.push_back(parse_not());
      return checked(std::move(n));
    }
    return parse_compare();
  }

  // a < b < c: one node, its operands in kids and its operators in kw, evaluated as Python does.
  NodePtr parse_compare() {
    auto left = parse_math1();
    NodePtr n;
    for (;;) {
      const int line = cur().line;
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">=")) {
        op = next().text;
      } else if (accept_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return n ? checked(std::move(n)) : std::move(left);
      }
      if (!n) {
        n = node(NodeKind::kCompare, line);
        n->kids.push_back(std::move(left));
      }
      n->kw.push_back(op);
      n->kids.push_back(parse_math1());
    }
  }

  NodePtr parse_math1() {
    auto left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      left = binary(NodeKind::kBinary, t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  NodePtr parse_concat() {
    auto left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary(NodeKind::kConcat, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  NodePtr parse_math2() {
    auto left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      left = binary(NodeKind::kBinary, t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  NodePtr parse_pow() {
    auto left = parse_unary();
    while (is_op("**")) {
      const int line = next().line;
      left = binary(NodeKind::kBinary, "**", std::move(left), parse_unary(), line);
    }
    return left;
  }

  NodePtr parse_unary(bool with_filter = true) {
    Depth guard(*this);
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      n = node(t.text == "-" ? NodeKind::kNeg : NodeKind::kPos, t.line);
      n->kids.push_back(parse_unary(false));
      n = checked(std::move(n));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    return with_filter ? parse_filter_expr(std::move(n)) : std::move(n);
  }

  NodePtr literal(Value v, int line) {
    auto n = node(NodeKind::kLiteral, line);
    n->value = std::move(v);
    return n;
  }

  NodePtr parse_primary() {
    const Token t = cur();
    switch (t.type) {
      case Tok::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        auto n = node(NodeKind::kName, t.line);
        n->name = t.text;
        return n;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) s += next().text;  // adjacent strings concatenate
        return literal(Value::string(std::move(s)), t.line);
      }
      case Tok::kInt:
        next();
        return literal(Value::integer(t.i), t.line);
      case Tok::kFloat:
        next();
        return literal(Value::real(t.f), t.line);
      case Tok::kOp:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        [[fallthrough]];
      default:
        fail("unexpected " + describe(t) + " in an expression");
    }
  }

  NodePtr parse_paren() {
    const int line = next().line;
    if (accept_op(")")) return node(NodeKind::kTuple, line);
    auto first = parse_expression();
    if (accept_op(")")) return first;
    auto n = node(NodeKind::kTuple, line);
    n->kids.push_back(std::move(first));
    while (accept_op(",")) {
      if (is_op(")")) break;
      n->kids.push_back(parse_expression());
    }
    expect_op(")");
    return checked(std::move(n));
  }

  NodePtr parse_list() {
    auto n = node(NodeKind::kList, next().line);
    while (!accept_op("]")) {
      if (!n->kids.empty()) expect_op(",");
      if (accept_op("]")) break;
      n->kids.push_back(parse_expression());
    }
    return checked(std::move(n));
  }

  NodePtr parse_dict() {
    auto n = node(NodeKind::kDict, next().line);
    while (!accept_op("}")) {
      if (!n->kids.empty()) expect_op(",");
      if (accept_op("}")) break;
      n->kids.push_back(parse_expression());
      expect_op(":");
      n->kids.push_back(parse_expression());
    }
    return checked(std::move(n));
  }

  NodePtr parse_postfix(NodePtr n) {
    for (;;) {
      if (is_op(".")) {
        const int line = next().line;
        auto a = node(NodeKind::kAttr, line);
        if (cur().type == Tok::kInt) {  // x.0 is x[0] in jinja2
          a->kind = NodeKind::kItem;
          a->kids.push_back(std::move(n));
          a->kids.push_back(literal(Value::integer(next().i), line));
        } else {
          a->name = expect_name();
          a->kids.push_back(std::move(n));
        }
        n = checked(std::move(a));
      } else if (is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  NodePtr parse_subscript(NodePtr subject) {
    Depth guard(*this);
    const int line = next().line;
    NodePtr parts[3];
    int colons = 0;
    for (;;) {
      if (is_op(":")) {
        if (++colons > 2) fail("a slice has at most two `:`");
        next();
      } else if (is_op("]")) {
        break;
      } else {
        if (parts[colons]) fail("expected `:` or `]` in a subscript, found " + describe(cur()));
        parts[colons] = parse_expression();
        if (colons == 0 && is_op(",")) fail("a tuple as a subscript is not supported");
      }
    }
    expect_op("]");
    auto n = node(colons ? NodeKind::kSlice : NodeKind::kItem, line);
    n->kids.push_back(std::move(subject));
    if (!colons && !parts[0]) fail("an empty subscript `[]`", line);
    for (int k = 0; k < (colons ? 3 : 1); ++k) n->kids.push_back(std::move(parts[k]));
    return checked(std::move(n));
  }

  // Arguments `(a, b, key=c)` into n's kids (after the subject) and kw.
  void parse_args(Node& n) {
    Depth guard(*this);
    expect_op("(");
    bool first = true;
    while (!accept_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (accept_op(")")) break;
      if (is_op("*") || is_op("**")) fail("`*args` and `**kwargs` in a call are not supported");
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        n.kw.push_back(next().text);
        next();
      } else if (!n.kw.empty()) {
        fail("a positional argument follows a keyword argument");
      }
      n.kids.push_back(parse_expression());
    }
  }

  NodePtr parse_call(NodePtr callee) {
    auto n = node(NodeKind::kCall, cur().line);
    n->kids.push_back(std::move(callee));
    parse_args(*n);
    return checked(std::move(n));
  }

  NodePtr parse_filter(NodePtr subject) {
    auto n = node(NodeKind::kFilter, cur().line);
    n->name = expect_name();
    while (accept_op(".")) n->name += "." + expect_name();
    if (!find_filter(n->name)) fail("unknown filter `" + n->name + "`", n->line);
    n->kids.push_back(std::move(subject));
    if (is_op("(")) parse_args(*n);
    return checked(std::move(n));
  }

  NodePtr parse_filter_expr(NodePtr n) {
    for (;;) {
      if (accept_op("|")) {
        n = parse_filter(std::move(n));
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  NodePtr parse_test(NodePtr subject) {
    auto n = node(NodeKind::kTest, next().line);
    n->negated = accept_name("not");
    n->name = expect_name();
    if (!find_test(n->name)) fail("unknown test `" + n->name + "`", n->line);
    n->kids.push_back(std::move(subject));
    if (is_op("(")) {
      parse_args(*n);
    } else if ((cur().type == Tok::kName && !is_name("else") && !is_name("or") && !is_name("and") &&
                !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is")) ||
               cur().type == Tok::kString || cur().type == Tok::kInt || cur().type == Tok::kFloat ||
               is_op("[") || is_op("{")) {
      n->kids.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
    }
    return checked(std::move(n));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  TemplateImpl& t_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

void parse_template(const std::string& source, TemplateImpl& out) {
  if (source.size() > out.limits.max_source_bytes) {
    throw Error(out.origin, 0,
                "the template is " + std::to_string(source.size()) +
                    " bytes, more than the cap of " + std::to_string(out.limits.max_source_bytes));
  }
  Parser parser(Lexer(source, out.origin).run(), out);
  out.body = parser.parse();
}

}  // namespace fsdp::data::jinja
