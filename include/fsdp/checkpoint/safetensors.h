// safetensors, Hugging Face's tensor file format: a validating reader that reads a tensor, or any
// element range of one, straight from the file, and a streaming writer that takes tensors piece by
// piece, in any order, and publishes the file atomically. docs/safetensors.md has the format, what
// we write and every error.
//
//   file = u64 little-endian N | N bytes of UTF-8 JSON header | byte buffer
//   header = {"__metadata__": {"format": "pt", ...}, "<name>": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end)}, ...}   (offsets relative to the byte buffer)
//
// The reader trusts nothing in the file: a header that breaks a rule of the format (see
// SafetensorsReader) is refused before any tensor is read, with a SafetensorsError naming the
// file and, where one is to blame, the tensor. Reads use pread: the file is never loaded whole,
// so a rank can read just the slice of each tensor it holds.
//
// Both classes assume a little-endian host (checked at compile time) and are not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {

// Thrown for every safetensors problem: a malformed file, a tensor that is missing or does not fit
// the destination, an I/O error. The message names the file and the tensor.
class SafetensorsError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// The element types of the format, in the order of safetensors' own Dtype enum (ascending
// alignment); the writer sorts tensors by this order, descending, as Hugging Face's writer does.
enum class SafetensorsDType {
  kBool,
  kF4,
  kF6E2M3,
  kF6E3M2,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

// "F32", "BF16", ... as the header spells them.
const char* safetensors_dtype_name(SafetensorsDType dtype);
std::optional<SafetensorsDType> parse_safetensors_dtype(const std::string& name);
// Bits per element: 4 and 6 for the sub-byte float formats, else 8 times the byte size.
int safetensors_dtype_bits(SafetensorsDType dtype);
// The LibTorch type holding this element type; nullopt for those LibTorch 1.13 lacks (U16, U32,
// U64, the F4/F6/F8 formats).
std::optional<at::ScalarType> to_scalar_type(SafetensorsDType dtype);
// Throws SafetensorsError for LibTorch types the format has no name for (complex double,
// quantized).
SafetensorsDType to_safetensors_dtype(at::ScalarType type);

// One tensor of a file: its header entry, offsets relative to the byte buffer as in the header.
struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // row-major; empty for a 0-d tensor
  int64_t numel = 0;
  int64_t begin = 0;  // [begin, end) in the byte buffer
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

// The largest header either class accepts: safetensors' own limit (100 MB).
constexpr int64_t kSafetensorsMaxHeaderBytes = 100000000;

// Opens and validates a file. Refused (SafetensorsError naming the file, and the tensor where one
// is to blame): a file shorter than 8 bytes; a header length above 100 MB or past the end of the
// file; a header that is not UTF-8 JSON, not an object, or repeats a key; "__metadata__" that is
// not an object of strings; a tensor entry without a known "dtype", a "shape" of non-negative
// integers, or "data_offsets" [begin, end] with begin <= end; a shape whose element count or byte
// size overflows int64; end - begin != the shape's byte size; and offsets that, sorted, do not
// tile the byte buffer exactly (an overlap, a hole, or bytes past the end or unindexed at it).
// Keys of a tensor entry other than those three are ignored, as safetensors ignores them.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const;
  // Tensors in file order (ascending offsets).
  const std::vector<SafetensorsTensorInfo>& tensors() const;
  // nullptr when the file has no tensor of that name.
  const SafetensorsTensorInfo* find(const std::string& name) const;
  // Throws SafetensorsError naming the file and the tensor when absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // "__metadata__", empty when the file has none.
  const std::map<std::string, std::string>& metadata() const;
  // Where the byte buffer starts in the file: 8 + the header length.
  int64_t data_offset() const;

  // The whole tensor into `out`, whose shape must equal the file's. The dtypes must be equal, or
  // both floating (F64, F32, F16, BF16), in which case the values are converted as
  // Tensor::to would; anything else (an integer into a float, F32 into I64) is refused.
  void read(const std::string& name, const at::Tensor& out) const;
  // Elements [begin, begin + count) of the tensor, flattened row-major, into `out` (count
  // elements, any shape); same dtype rules as read(). Reads only those bytes of the file.
  void read_elements(const std::string& name, int64_t begin, int64_t count,
                     const at::Tensor& out) const;
  // Raw bytes [offset, offset + bytes) of the tensor's data, any dtype.
  void read_bytes(const std::string& name, int64_t offset, int64_t bytes, void* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What the writer is told up front about each tensor.
struct SafetensorsTensorSpec {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
};

// Streams a safetensors file. The constructor takes every tensor's name, dtype and shape, lays them
// out as Hugging Face's writer does (sorted by dtype alignment, descending, then by name; the JSON
// header compact and padded with spaces to a multiple of 8 bytes, so every tensor starts 8-byte
// aligned) and writes the header to `<path>.tmp`. The tensors' bytes then come in any order and in
// pieces of any size, each byte exactly once; commit() checks that every byte arrived, fsyncs, and
// renames the temporary file over `path` (then fsyncs the folder). Until then `path` is untouched:
// a crash leaves at most `<path>.tmp`, and a writer destroyed without commit() deletes it.
// "__metadata__" always holds "format": "pt" (transformers checks it; older releases refuse files
// without it) plus the caller's entries. Two writers must not target one path at the same time.
class SafetensorsWriter {
 public:
  // Throws SafetensorsError for a repeated or reserved ("__metadata__") name, a name that is not
  // UTF-8, a negative dimension, a size that overflows int64 or is not whole bytes, metadata
  // "format" other than "pt", a header over 100 MB, or a temporary file that cannot be created.
  SafetensorsWriter(std::string path, std::vector<SafetensorsTensorSpec> tensors,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  const std::string& path() const;
  // The layout, in file order.
  const std::vector<SafetensorsTensorInfo>& tensors() const;
  const SafetensorsTensorInfo& info(const std::string& name) const;

  // The whole tensor: `t` must have the declared shape and exactly the declared dtype.
  void write(const std::string& name, const at::Tensor& t);
  // Bytes [offset, offset + bytes) of the tensor's data. Refused: an unknown name, a range outside
  // the tensor, a range overlapping bytes already written, a write after commit().
  void write_bytes(const std::string& name, int64_t offset, const void* data, int64_t bytes);
  // Throws SafetensorsError naming the first tensor with bytes missing (and leaves `path` as it
  // was); afterwards the writer accepts nothing more.
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp
