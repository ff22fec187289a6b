// SafetensorsSet (safetensors_set.h): resolving a path to its files, checking an index against
// them, and the name map.
#include "fsdp/checkpoint/safetensors_set.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/json.h"

namespace fsdp {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail_set(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors '" + path + "': " + what);
}

// The index's weight map: tensor name -> file name (a plain name in the index's folder).
std::map<std::string, std::string> read_weight_map(const std::string& index) {
  nlohmann::json j;
  try {
    // An index lists a name and a file per tensor: 64 MiB is 100 times a 70B model's.
    j = json_bounds::parse(
        json_bounds::read_file(index, json_bounds::kMaxTokenizerJsonBytes, "an index file"),
        "the index");
  } catch (const nlohmann::json::exception& e) {
    fail_set(index, std::string("the index is not JSON: ") + e.what());
  } catch (const std::runtime_error& e) {
    fail_set(index, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    fail_set(index, "the index has no \"weight_map\" object");
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail_set(index, "weight_map['" + name + "'] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || fs::path(f).has_parent_path() || f == "." || f == "..") {
      fail_set(index,
           "weight_map['" + name + "'] = '" + f + "' is not a file name in the index's folder");
    }
    map[name] = f;
  }
  if (map.empty()) fail_set(index, "the index's weight_map is empty");
  return map;
}

bool is_index(const std::string& path) { return fs::path(path).extension() == ".json"; }

}  // namespace

struct SafetensorsSet::Impl {
  std::string path;
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  struct Entry {
    const SafetensorsReader* reader;
    std::string file_name;  // the name inside that file
  };
  std::map<std::string, Entry> entries;

  void add(const SafetensorsReader& r, const std::string& file_name, const TensorNameMap& map) {
    const std::string name = map ? map(file_name) : file_name;
    if (name.empty()) return;
    auto [it, fresh] = entries.emplace(name, Entry{&r, file_name});
    if (!fresh) {
      fail_set(path, "tensors '" + it->second.file_name + "' (" + it->second.reader->path() +
                     ") and '" + file_name + "' (" + r.path() + ") both map to '" + name + "'");
    }
  }

  void open_index(const std::string& index, const TensorNameMap& map) {
    const std::map<std::string, std::string> weight_map = read_weight_map(index);
    const fs::path folder = fs::path(index).parent_path();
    std::map<std::string, const SafetensorsReader*> by_file;
    for (const auto& [tensor, file] : weight_map) {
      if (by_file.count(file)) continue;
      const std::string full = (folder / file).string();
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(full, ec))) {
        fail_set(index, "names '" + file + "', which is missing");
      }
      if (!fs::is_regular_file(full, ec)) {
        fail_set(index, "names '" + file +
                        "', which is not a regular file (a folder, a device or a FIFO, or a link "
                        "to one)");
      }
      readers.push_back(std::make_unique<SafetensorsReader>(full));
      by_file[file] = readers.back().get();
    }
    for (const auto& [tensor, file] : weight_map) {
      const SafetensorsReader& r = *by_file.at(file);
      if (r.find(tensor) == nullptr) {
        fail_set(index, "puts tensor '" + tensor + "' in '" + file + "', which has no such tensor");
      }
      add(r, tensor, map);
    }
  }
};

SafetensorsSet::SafetensorsSet(const std::string& path, TensorNameMap name_map)
    : impl_(std::make_unique<Impl>()) {
  std::string target = path;
  if (fs::is_directory(path)) {
    const fs::path index = fs::path(path) / kSafetensorsIndexName;
    const fs::path single = fs::path(path) / kSafetensorsSingleName;
    if (fs::exists(single)) {
      target = single.string();
    } else if (fs::exists(index)) {
      target = index.string();
    } else {
      fail_set(path, std::string("a folder with neither ") + kSafetensorsIndexName + " nor " +
                     kSafetensorsSingleName);
    }
  }
  impl_->path = target;
  if (is_index(target)) {
    impl_->open_index(target, name_map);
    return;
  }
  impl_->readers.push_back(std::make_unique<SafetensorsReader>(target));
  for (const auto& t : impl_->readers.back()->tensors()) {
    impl_->add(*impl_->readers.back(), t.name, name_map);
  }
}

SafetensorsSet::~SafetensorsSet() = default;
SafetensorsSet::SafetensorsSet(SafetensorsSet&&) noexcept = default;
SafetensorsSet& SafetensorsSet::operator=(SafetensorsSet&&) noexcept = default;

const std::string& SafetensorsSet::path() const { return impl_->path; }

std::vector<std::string> SafetensorsSet::files() const {
  std::vector<std::string> out;
  for (const auto& r : impl_->readers) out.push_back(r->path());
  return out;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : impl_->entries) out.push_back(name);
  return out;
}

const SafetensorsTensorInfo* SafetensorsSet::find(const std::string& name) const {
  auto it = impl_->entries.find(name);
  return it == impl_->entries.end() ? nullptr : it->second.reader->find(it->second.file_name);
}

const std::string& SafetensorsSet::file_of(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) fail_set(impl_->path, "no tensor '" + name + "'");
  return it->second.reader->path();
}

void SafetensorsSet::read_elements(const std::string& name, int64_t begin, int64_t count,
                                   const at::Tensor& out) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) fail_set(impl_->path, "no tensor '" + name + "'");
  it->second.reader->read_elements(it->second.file_name, begin, count, out);
}

}  // namespace fsdp
