// A model's weights in safetensors, in one file or in several behind an index: the layout
// transformers' save_pretrained writes (model.safetensors, or model-00001-of-00003.safetensors ...
// with model.safetensors.index.json = {"metadata": {...}, "weight_map": {tensor: file}}). This file
// owns finding the files, checking the index against them, and the renaming of tensors from the
// file's names to the model's; reading stays SafetensorsReader's (pread of just the bytes asked
// for), so a rank reading its shard never reads the rest of a file.
//
// Thread-safety: none (SafetensorsReader's).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/checkpoint/safetensors.h"

namespace fsdp {

// The index's file name next to the shards, and the single file's.
inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";

// Maps a tensor's name in the files to the name it is known by in the set; an empty result drops
// the tensor (a buffer the model does not have, say).
using TensorNameMap = std::function<std::string(const std::string& file_name)>;

class SafetensorsSet {
 public:
  // `path`: a .safetensors file, an index (.json), or a folder holding model.safetensors.index.json
  // or model.safetensors (the single file first, as transformers looks). Every file is opened and
  // checked (SafetensorsReader) before this returns. Throws SafetensorsError naming the file at
  // fault: a folder with neither file, an index that is not JSON with a "weight_map" object of file
  // names, a file name with a folder part, an index naming a file that is missing or lacks the
  // tensor the index puts there, and two tensors that map to one name.
  explicit SafetensorsSet(const std::string& path, TensorNameMap name_map = {});
  ~SafetensorsSet();
  SafetensorsSet(SafetensorsSet&&) noexcept;
  SafetensorsSet& operator=(SafetensorsSet&&) noexcept;

  // What was opened: the single file, or the index.
  const std::string& path() const;
  // The data files, in the order opened.
  std::vector<std::string> files() const;
  // Every tensor's name in the set (after the name map), sorted.
  std::vector<std::string> names() const;
  // nullptr when the set has no tensor of that name.
  const SafetensorsTensorInfo* find(const std::string& name) const;
  // The file holding `name`; throws SafetensorsError when there is none.
  const std::string& file_of(const std::string& name) const;
  // SafetensorsReader::read_elements on the file holding `name` (under its name there).
  void read_elements(const std::string& name, int64_t begin, int64_t count,
                     const at::Tensor& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp
