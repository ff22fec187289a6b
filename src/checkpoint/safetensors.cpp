// safetensors: the dtype table, the header's validation, the reader (pread, never the whole file)
// and the streaming writer (pwrite at each tensor's offset, then an atomic rename). The rules the
// reader enforces are safetensors' own (huggingface/safetensors, tensor.rs: read_metadata and
// Metadata::validate), plus two it leaves implicit: no repeated keys, and tensors named in errors.
#include "fsdp/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "util/files.h"
#include "util/json.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian data and this build reads and writes it as is");

namespace fsdp {
namespace {

using json = nlohmann::json;

// --- dtypes -------------------------------------------------------------------------------------

struct DTypeEntry {
  SafetensorsDType dtype;
  const char* name;
  int bits;
  std::optional<at::ScalarType> scalar;
};

// In SafetensorsDType's order, which is safetensors' Dtype enum order.
const DTypeEntry kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 8, at::kBool},
    {SafetensorsDType::kF4, "F4", 4, std::nullopt},
    {SafetensorsDType::kF6E2M3, "F6_E2M3", 6, std::nullopt},
    {SafetensorsDType::kF6E3M2, "F6_E3M2", 6, std::nullopt},
    {SafetensorsDType::kU8, "U8", 8, at::kByte},
    {SafetensorsDType::kI8, "I8", 8, at::kChar},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 8, std::nullopt},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 8, std::nullopt},
    {SafetensorsDType::kF8E8M0, "F8_E8M0", 8, std::nullopt},
    {SafetensorsDType::kI16, "I16", 16, at::kShort},
    {SafetensorsDType::kU16, "U16", 16, std::nullopt},
    {SafetensorsDType::kF16, "F16", 16, at::kHalf},
    {SafetensorsDType::kBF16, "BF16", 16, at::kBFloat16},
    {SafetensorsDType::kI32, "I32", 32, at::kInt},
    {SafetensorsDType::kU32, "U32", 32, std::nullopt},
    {SafetensorsDType::kF32, "F32", 32, at::kFloat},
    {SafetensorsDType::kC64, "C64", 64, at::kComplexFloat},
    {SafetensorsDType::kF64, "F64", 64, at::kDouble},
    {SafetensorsDType::kI64, "I64", 64, at::kLong},
    {SafetensorsDType::kU64, "U64", 64, std::nullopt},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) ==
                  static_cast<size_t>(SafetensorsDType::kU64) + 1,
              "one table row per SafetensorsDType");

const DTypeEntry& dtype_row(SafetensorsDType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

bool is_floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// --- errors and POSIX I/O -----------------------------------------------------------------------

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors '" + path + "': " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  fail(path, "tensor '" + name + "': " + what);
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  fail(path, what + ": " + std::strerror(errno));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// An open file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, so that the caller sees close's error (delayed write errors surface there).
  int close() { return fd_ < 0 ? 0 : ::close(std::exchange(fd_, -1)); }

 private:
  int fd_ = -1;
};

void pread_exact(int fd, const std::string& path, int64_t offset, void* out, int64_t bytes) {
  char* p = static_cast<char*>(out);
  const int64_t end = offset + bytes;
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fail_errno(path,
                 "cannot read bytes [" + std::to_string(offset) + ", " + std::to_string(end) + ")");
    }
    if (n == 0) {
      fail(path, "the file ends at byte " + std::to_string(offset) + ", needed up to " +
                     std::to_string(end) + " (truncated while open?)");
    }
    p += n;
    offset += n;
    bytes -= n;
  }
}

void pwrite_all(int fd, const std::string& path, int64_t offset, const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path, "cannot write at byte " + std::to_string(offset));
    p += n;
    offset += n;
    bytes -= n;
  }
}

void fsync_dir_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno(path, "cannot open its folder '" + dir + "' to fsync it");
  if (::fsync(fd.get()) != 0) fail_errno(path, "cannot fsync its folder '" + dir + "'");
}

// --- header validation --------------------------------------------------------------------------

// The size of the regular file open as fd; anything else (a folder, a FIFO, a device) refused.
int64_t file_size(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail_errno(path, "cannot stat");
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file (a folder, a FIFO, a device)");
  return st.st_size;
}

int64_t read_header_length(int fd, const std::string& path, int64_t size) {
  if (size < 8) {
    fail(path, "is " + std::to_string(size) +
                   " bytes long, too short for the 8-byte header length: not a safetensors file");
  }
  unsigned char b[8];
  pread_exact(fd, path, 0, b, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  if (n > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
    fail(path, "header length " + std::to_string(n) + " is over the format's limit of " +
                   std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (100 MB)");
  }
  if (static_cast<int64_t>(n) > size - 8) {
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  }
  return static_cast<int64_t>(n);
}

// Parses the header, refusing a key repeated within one object: nlohmann (like serde) would keep
// one of the two silently, and which tensor a name means must not be a guess.
json parse_header_json(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto watch = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there; JSON allows none anywhere.
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    fail(path,
         "the header is not valid UTF-8 JSON: a NUL byte at header offset " + std::to_string(nul));
  }
  const size_t deep = json_bounds::too_deep_at(text);
  if (deep != std::string::npos) fail(path, json_bounds::too_deep_message("the header", deep));
  json header;
  try {
    header = json::parse(text, watch);
  } catch (const json::exception& e) {
    fail(path, std::string("the header is not valid UTF-8 JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "key '" + duplicate + "' appears twice in the header");
  if (!header.is_object()) {
    fail(path, "the header is a JSON " + std::string(header.type_name()) + ", not an object");
  }
  return header;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& path) {
  if (!j.is_object()) fail(path, "\"__metadata__\" is not an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      fail(path,
           "\"__metadata__\" entry '" + key + "' is a " + value.type_name() + ", not a string");
    }
    out[key] = value.get<std::string>();
  }
  return out;
}

// A non-negative integer that fits int64 (`what` names it in the error).
int64_t get_count(const json& v, const std::string& path, const std::string& name,
                  const std::string& what) {
  if (!v.is_number_unsigned()) {
    fail_tensor(path, name,
                what + " must be a non-negative integer, got " + json_bounds::excerpt(v));
  }
  const uint64_t n = v.get<uint64_t>();
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail_tensor(path, name, what + " " + std::to_string(n) + " overflows int64");
  }
  return static_cast<int64_t>(n);
}

const json& field(const json& entry, const char* key, const std::string& path,
                  const std::string& name) {
  auto it = entry.find(key);
  if (it == entry.end()) fail_tensor(path, name, std::string("no \"") + key + "\" in its entry");
  return *it;
}

SafetensorsDType parse_dtype_field(const json& entry, const std::string& path,
                                   const std::string& name) {
  const json& d = field(entry, "dtype", path, name);
  std::optional<SafetensorsDType> dtype;
  if (d.is_string()) dtype = parse_safetensors_dtype(d.get<std::string>());
  if (!dtype) fail_tensor(path, name, "unknown dtype " + json_bounds::excerpt(d));
  return *dtype;
}

std::vector<int64_t> parse_shape(const json& entry, const std::string& path,
                                 const std::string& name) {
  const json& s = field(entry, "shape", path, name);
  if (!s.is_array())
    fail_tensor(path, name, "\"shape\" is not an array: " + json_bounds::excerpt(s));
  std::vector<int64_t> shape;
  for (const json& d : s) shape.push_back(get_count(d, path, name, "shape dimension"));
  return shape;
}

// Element count and byte size, refusing int64 overflow and sizes that are not whole bytes.
std::pair<int64_t, int64_t> checked_sizes(SafetensorsDType dtype, const std::vector<int64_t>& shape,
                                          const std::string& path, const std::string& name) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(numel, d, &numel)) {
      fail_tensor(path, name, "shape " + shape_text(shape) + " has more elements than int64 holds");
    }
  }
  int64_t bits = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_row(dtype).bits), &bits)) {
    fail_tensor(path, name,
                "shape " + shape_text(shape) + " of " + dtype_row(dtype).name +
                    " has more bytes than int64 holds");
  }
  if (bits % 8 != 0) {
    fail_tensor(path, name,
                std::to_string(numel) + " elements of " + dtype_row(dtype).name +
                    " are not a whole number of bytes");
  }
  return {numel, bits / 8};
}

SafetensorsTensorInfo parse_tensor(const std::string& name, const json& entry,
                                   const std::string& path) {
  if (!entry.is_object())
    fail_tensor(path, name, "its entry is not an object: " + json_bounds::excerpt(entry));
  SafetensorsTensorInfo t;
  t.name = name;
  t.dtype = parse_dtype_field(entry, path, name);
  t.shape = parse_shape(entry, path, name);
  const auto [numel, nbytes] = checked_sizes(t.dtype, t.shape, path, name);
  t.numel = numel;
  const json& offsets = field(entry, "data_offsets", path, name);
  if (!offsets.is_array() || offsets.size() != 2) {
    fail_tensor(path, name,
                "\"data_offsets\" must be [begin, end], got " + json_bounds::excerpt(offsets));
  }
  t.begin = get_count(offsets[0], path, name, "data_offsets begin");
  t.end = get_count(offsets[1], path, name, "data_offsets end");
  if (t.end < t.begin) {
    fail_tensor(path, name,
                "data_offsets " + json_bounds::excerpt(offsets) + " end before they begin");
  }
  if (t.end - t.begin != nbytes) {
    fail_tensor(path, name,
                "data_offsets " + json_bounds::excerpt(offsets) + " span " +
                    std::to_string(t.end - t.begin) + " bytes, but " + dtype_row(t.dtype).name +
                    " " + shape_text(t.shape) + " needs " + std::to_string(nbytes));
  }
  return t;
}

// The format requires the tensors, in offset order, to tile the byte buffer: no overlap (two
// tensors sharing bytes), no hole, nothing past the end or unindexed at it.
void check_tiling(std::vector<SafetensorsTensorInfo>& tensors, int64_t buffer_bytes,
                  const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  int64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const auto& t : tensors) {
    const std::string range = "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
    if (t.begin < covered) {
      fail_tensor(path, t.name,
                  "bytes " + range + " overlap tensor '" + previous->name + "', which ends at " +
                      std::to_string(covered));
    }
    if (t.begin > covered) {
      fail_tensor(path, t.name,
                  "starts at byte " + std::to_string(t.begin) + ", leaving a hole [" +
                      std::to_string(covered) + ", " + std::to_string(t.begin) +
                      ") in the byte buffer that no tensor indexes");
    }
    if (t.end > buffer_bytes) {
      fail_tensor(path, t.name,
                  "bytes " + range + " run past the end of the file (its byte buffer has " +
                      std::to_string(buffer_bytes) + " bytes)");
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != buffer_bytes) {
    fail(path, "the tensors index " + std::to_string(covered) + " bytes of a " +
                   std::to_string(buffer_bytes) + "-byte buffer: the rest is unindexed");
  }
}

void check_convertible(const std::string& path, const SafetensorsTensorInfo& t, at::ScalarType from,
                       at::ScalarType to) {
  if (from == to || (is_floating(from) && is_floating(to))) return;
  fail_tensor(path, t.name,
              std::string("cannot read ") + dtype_row(t.dtype).name + " into a " +
                  c10::toString(to) + " tensor (only floating types convert)");
}

// --- writer layout ------------------------------------------------------------------------------

void check_specs(const std::vector<SafetensorsTensorSpec>& specs, const std::string& path) {
  std::set<std::string> names;
  for (const auto& s : specs) {
    if (s.name == "__metadata__") fail_tensor(path, s.name, "the name is reserved by the format");
    if (!names.insert(s.name).second) fail_tensor(path, s.name, "declared twice");
    try {
      (void)json(s.name).dump();
    } catch (const json::exception&) {
      fail_tensor(path, s.name, "the name is not valid UTF-8");
    }
    for (int64_t d : s.shape) {
      if (d < 0) fail_tensor(path, s.name, "negative dimension in shape " + shape_text(s.shape));
    }
  }
}

// Hugging Face's order: dtype alignment descending, then name (bytewise, as Rust compares).
std::vector<SafetensorsTensorInfo> lay_out(std::vector<SafetensorsTensorSpec> specs,
                                           const std::string& path) {
  check_specs(specs, path);
  std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) {
    if (a.dtype != b.dtype) return a.dtype > b.dtype;
    return a.name < b.name;
  });
  std::vector<SafetensorsTensorInfo> out;
  int64_t offset = 0;
  for (auto& s : specs) {
    const auto [numel, nbytes] = checked_sizes(s.dtype, s.shape, path, s.name);
    SafetensorsTensorInfo t{std::move(s.name), s.dtype, std::move(s.shape), numel, offset, 0};
    if (__builtin_add_overflow(offset, nbytes, &t.end)) {
      fail_tensor(path, t.name, "the file would exceed int64 bytes");
    }
    offset = t.end;
    out.push_back(std::move(t));
  }
  return out;
}

// The compact JSON safetensors' writer produces (metadata first, then tensors in offset order),
// padded with spaces to a multiple of 8 bytes so that the byte buffer starts 8-byte aligned.
std::string header_text(const std::vector<SafetensorsTensorInfo>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  nlohmann::ordered_json h;
  h["__metadata__"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) h["__metadata__"][k] = v;
  for (const auto& t : tensors) {
    nlohmann::ordered_json e;
    e["dtype"] = dtype_row(t.dtype).name;
    e["shape"] = nlohmann::ordered_json::array();
    for (int64_t d : t.shape) e["shape"].push_back(d);
    e["data_offsets"] = nlohmann::ordered_json::array({t.begin, t.end});
    h[t.name] = std::move(e);
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const json::exception&) {
    fail(path, "a metadata entry is not valid UTF-8");
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');
  if (static_cast<int64_t>(text.size()) > kSafetensorsMaxHeaderBytes) {
    fail(path, "the header would be " + std::to_string(text.size()) +
                   " bytes, over the format's limit of 100 MB");
  }
  return text;
}

std::map<std::string, std::string> with_format(std::map<std::string, std::string> metadata,
                                               const std::string& path) {
  auto it = metadata.find("format");
  if (it != metadata.end() && it->second != "pt") {
    fail(path, "metadata \"format\" is \"" + it->second +
                   "\"; this writer writes PyTorch tensors, \"pt\" (transformers checks it)");
  }
  metadata["format"] = "pt";
  return metadata;
}

// --- written-byte bookkeeping -------------------------------------------------------------------

// Disjoint written ranges of one tensor, begin -> end, adjacent ranges merged.
using Ranges = std::map<int64_t, int64_t>;

bool overlaps(const Ranges& r, int64_t b, int64_t e) {
  auto next = r.lower_bound(b);
  if (next != r.end() && next->first < e) return true;
  return next != r.begin() && std::prev(next)->second > b;
}

void add_range(Ranges& r, int64_t b, int64_t e) {
  auto next = r.lower_bound(b);
  if (next != r.end() && next->first == e) {
    e = next->second;
    next = r.erase(next);
  }
  if (next != r.begin() && std::prev(next)->second == b) {
    std::prev(next)->second = e;
    return;
  }
  r.emplace(b, e);
}

int64_t bytes_in(const Ranges& r) {
  int64_t n = 0;
  for (const auto& [b, e] : r) n += e - b;
  return n;
}

// The file's LibTorch type for reading `count` elements from `begin` into `out`, after checking
// the range, the destination and that the types may convert.
at::ScalarType checked_source_type(const std::string& path, const SafetensorsTensorInfo& t,
                                   int64_t begin, int64_t count, const at::Tensor& out) {
  if (begin < 0 || count < 0 || begin > t.numel - count) {
    fail_tensor(path, t.name,
                std::to_string(count) + " elements from element " + std::to_string(begin) +
                    " are outside its " + std::to_string(t.numel));
  }
  if (!out.defined() || out.numel() != count || !out.device().is_cpu()) {
    fail_tensor(path, t.name,
                "the destination must be a CPU tensor of " + std::to_string(count) + " elements");
  }
  const std::optional<at::ScalarType> from = dtype_row(t.dtype).scalar;
  if (!from) {
    fail_tensor(path, t.name, std::string(dtype_row(t.dtype).name) + " has no LibTorch type");
  }
  check_convertible(path, t, *from, out.scalar_type());
  return *from;
}

}  // namespace

// --- dtype functions ----------------------------------------------------------------------------

const char* safetensors_dtype_name(SafetensorsDType dtype) { return dtype_row(dtype).name; }

std::optional<SafetensorsDType> parse_safetensors_dtype(const std::string& name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return std::nullopt;
}

int safetensors_dtype_bits(SafetensorsDType dtype) { return dtype_row(dtype).bits; }

std::optional<at::ScalarType> to_scalar_type(SafetensorsDType dtype) {
  return dtype_row(dtype).scalar;
}

SafetensorsDType to_safetensors_dtype(at::ScalarType type) {
  for (const auto& e : kDTypes) {
    if (e.scalar == type) return e.dtype;
  }
  throw SafetensorsError(std::string("safetensors has no dtype for LibTorch's ") +
                         c10::toString(type));
}

// --- reader -------------------------------------------------------------------------------------

struct SafetensorsReader::Impl {
  std::string path;
  Fd fd;
  int64_t data_offset = 0;
  std::vector<SafetensorsTensorInfo> tensors;
  std::unordered_map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;
};

SafetensorsReader::SafetensorsReader(std::string path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = std::move(path);
  // O_NONBLOCK: a FIFO in the file's place opens at once (then is refused) instead of waiting for
  // a writer; reads of a regular file ignore the flag.
  m.fd = Fd(::open(m.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (m.fd.get() < 0) fail_errno(m.path, "cannot open");
  const int64_t size = file_size(m.fd.get(), m.path);
  const int64_t n = read_header_length(m.fd.get(), m.path, size);
  std::string text(static_cast<size_t>(n), '\0');
  pread_exact(m.fd.get(), m.path, 8, text.data(), n);
  const json header = parse_header_json(text, m.path);
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      m.metadata = parse_metadata(value, m.path);
    } else {
      m.tensors.push_back(parse_tensor(key, value, m.path));
    }
  }
  m.data_offset = 8 + n;
  check_tiling(m.tensors, size - m.data_offset, m.path);
  for (size_t i = 0; i < m.tensors.size(); ++i) m.index[m.tensors[i].name] = i;
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::string& SafetensorsReader::path() const { return impl_->path; }
const std::vector<SafetensorsTensorInfo>& SafetensorsReader::tensors() const {
  return impl_->tensors;
}
const std::map<std::string, std::string>& SafetensorsReader::metadata() const {
  return impl_->metadata;
}
int64_t SafetensorsReader::data_offset() const { return impl_->data_offset; }

const SafetensorsTensorInfo* SafetensorsReader::find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

const SafetensorsTensorInfo& SafetensorsReader::info(const std::string& name) const {
  const SafetensorsTensorInfo* t = find(name);
  if (t == nullptr) fail_tensor(impl_->path, name, "not in the file");
  return *t;
}

void SafetensorsReader::read_bytes(const std::string& name, int64_t offset, int64_t bytes,
                                   void* out) const {
  const SafetensorsTensorInfo& t = info(name);
  if (offset < 0 || bytes < 0 || offset > t.nbytes() - bytes) {
    fail_tensor(impl_->path, name,
                std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                    " are outside its " + std::to_string(t.nbytes()) + " bytes");
  }
  pread_exact(impl_->fd.get(), impl_->path, impl_->data_offset + t.begin + offset, out, bytes);
}

void SafetensorsReader::read(const std::string& name, const at::Tensor& out) const {
  const SafetensorsTensorInfo& t = info(name);
  if (!out.defined() || out.sizes().vec() != t.shape) {
    fail_tensor(impl_->path, name,
                "shape " + shape_text(t.shape) + " in the file, " +
                    (out.defined() ? shape_text(out.sizes().vec()) : "undefined") +
                    " in the destination");
  }
  read_elements(name, 0, t.numel, out);
}

void SafetensorsReader::read_elements(const std::string& name, int64_t begin, int64_t count,
                                      const at::Tensor& out) const {
  const SafetensorsTensorInfo& t = info(name);
  const at::ScalarType from = checked_source_type(impl_->path, t, begin, count, out);
  if (count == 0) return;
  const int64_t esize = static_cast<int64_t>(c10::elementSize(from));
  if (from == out.scalar_type() && out.is_contiguous()) {
    read_bytes(name, begin * esize, count * esize, out.data_ptr());
    return;
  }
  // Converted (or scattered into a strided destination) in chunks, so the staging buffer stays
  // small whatever the tensor's size.
  constexpr int64_t kChunk = int64_t{1} << 22;
  const at::Tensor flat = out.is_contiguous() ? out.view({-1}) : at::empty({count}, out.options());
  const at::Tensor staging = at::empty({std::min(kChunk, count)}, at::TensorOptions().dtype(from));
  for (int64_t i = 0; i < count; i += kChunk) {
    const int64_t n = std::min(kChunk, count - i);
    const at::Tensor piece = staging.narrow(0, 0, n);
    read_bytes(name, (begin + i) * esize, n * esize, piece.data_ptr());
    flat.narrow(0, i, n).copy_(piece);
  }
  if (!out.is_contiguous()) out.copy_(flat.view(out.sizes()));
}

// --- writer -------------------------------------------------------------------------------------

struct SafetensorsWriter::Impl {
  std::string path;
  files::TempGuard tmp;       // removes the temporary unless committed, and on SIGINT in tools
  files::OutputState before;  // what was at `path` when writing began
  Fd fd;
  int64_t data_offset = 0;
  std::vector<SafetensorsTensorInfo> tensors;
  std::unordered_map<std::string, size_t> index;
  std::vector<Ranges> written;  // per tensor
  bool committed = false;

  size_t find(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end()) fail_tensor(path, name, "was not declared to the writer");
    return it->second;
  }
};

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsTensorSpec> tensors,
                                     std::map<std::string, std::string> metadata)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = std::move(path);
  m.tensors = lay_out(std::move(tensors), m.path);
  const std::string header =
      header_text(m.tensors, with_format(std::move(metadata), m.path), m.path);
  for (size_t i = 0; i < m.tensors.size(); ++i) m.index[m.tensors[i].name] = i;
  m.written.resize(m.tensors.size());
  m.data_offset = 8 + static_cast<int64_t>(header.size());
  const int64_t total = m.data_offset + (m.tensors.empty() ? 0 : m.tensors.back().end);

  m.before = files::output_state(m.path);
  try {
    m.fd = Fd(files::create_temp_file(m.path, &m.tmp));  // this writer's own, never shared
  } catch (const std::runtime_error& e) {
    fail(m.path, e.what());
  }
  unsigned char n[8];
  for (int i = 0; i < 8; ++i) n[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  pwrite_all(m.fd.get(), m.tmp.path(), 0, n, 8);
  pwrite_all(m.fd.get(), m.tmp.path(), 8, header.data(), static_cast<int64_t>(header.size()));
  // Full length now, so tensors may arrive in any order and commit() finds no short file.
  if (::ftruncate(m.fd.get(), total) != 0) {
    fail_errno(m.tmp.path(), "cannot extend to " + std::to_string(total) + " bytes");
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (impl_ && !impl_->committed) impl_->fd.close();  // the guard removes the temporary
}

const std::string& SafetensorsWriter::path() const { return impl_->path; }
const std::vector<SafetensorsTensorInfo>& SafetensorsWriter::tensors() const {
  return impl_->tensors;
}
const SafetensorsTensorInfo& SafetensorsWriter::info(const std::string& name) const {
  return impl_->tensors[impl_->find(name)];
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& t) {
  const SafetensorsTensorInfo& info = impl_->tensors[impl_->find(name)];
  if (!t.defined() || !t.device().is_cpu()) {
    fail_tensor(impl_->path, name, "not a defined CPU tensor");
  }
  if (to_safetensors_dtype(t.scalar_type()) != info.dtype) {
    fail_tensor(impl_->path, name,
                std::string("declared ") + dtype_row(info.dtype).name + ", given " +
                    c10::toString(t.scalar_type()));
  }
  if (t.sizes().vec() != info.shape) {
    fail_tensor(
        impl_->path, name,
        "declared shape " + shape_text(info.shape) + ", given " + shape_text(t.sizes().vec()));
  }
  const at::Tensor c = t.contiguous();
  write_bytes(name, 0, c.data_ptr(), info.nbytes());
}

void SafetensorsWriter::write_bytes(const std::string& name, int64_t offset, const void* data,
                                    int64_t bytes) {
  Impl& m = *impl_;
  if (m.committed) fail_tensor(m.path, name, "written after commit()");
  const size_t i = m.find(name);
  const SafetensorsTensorInfo& t = m.tensors[i];
  const std::string range = std::to_string(bytes) + " bytes at offset " + std::to_string(offset);
  if (offset < 0 || bytes < 0 || offset > t.nbytes() - bytes) {
    fail_tensor(m.path, name, range + " are outside its " + std::to_string(t.nbytes()) + " bytes");
  }
  if (bytes == 0) return;
  if (overlaps(m.written[i], offset, offset + bytes)) {
    fail_tensor(m.path, name, range + " overlap bytes already written");
  }
  pwrite_all(m.fd.get(), m.tmp.path(), m.data_offset + t.begin + offset, data, bytes);
  add_range(m.written[i], offset, offset + bytes);
}

void SafetensorsWriter::commit() {
  Impl& m = *impl_;
  if (m.committed) fail(m.path, "commit() called twice");
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const int64_t got = bytes_in(m.written[i]);
    if (got != m.tensors[i].nbytes()) {
      fail_tensor(m.path, m.tensors[i].name,
                  "only " + std::to_string(got) + " of its " +
                      std::to_string(m.tensors[i].nbytes()) + " bytes were written");
    }
  }
  if (::fsync(m.fd.get()) != 0) fail_errno(m.tmp.path(), "cannot fsync");
  if (m.fd.close() != 0) fail_errno(m.tmp.path(), "cannot close");
  try {
    files::rename_into_place(m.tmp.path(), m.path, m.before);
  } catch (const std::runtime_error& e) {
    fail(m.path, e.what());
  }
  m.tmp.keep();
  m.committed = true;
  fsync_dir_of(m.path);
}

}  // namespace fsdp
