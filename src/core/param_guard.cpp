// ParamGuard (param_guard.h): the guarded twin of a parameter's view, the swaps between the two,
// the registry of guarded parameters' names, and the DeferredInit fallback that turns any op on a
// released parameter into fsdp's error.
#include "core/param_guard.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "fsdp/comm.h"

namespace fsdp {
namespace {

constexpr c10::DispatchKey kReleasedKey = c10::DispatchKey::DeferredInit;

struct ReleasedNames {
  std::mutex mutex;
  // The parameter's TensorImpl (what a user's handle wraps) to "'name' (unit 'u')".
  std::unordered_map<const c10::TensorImpl*, std::string> names;
};

ReleasedNames& released_names() {
  static ReleasedNames* r = new ReleasedNames();  // never destroyed: a fallback may run at exit
  return *r;
}

std::string describe_param(const c10::TensorImpl* impl) {
  ReleasedNames& r = released_names();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.names.find(impl);
  return it == r.names.end() ? std::string() : it->second;
}

// The first released parameter among an op's arguments, described; "" when none is registered.
std::string released_argument(const torch::jit::Stack& stack) {
  auto check = [](const at::Tensor& t) {
    return t.defined() && t.key_set().has(kReleasedKey) ? describe_param(t.unsafeGetTensorImpl())
                                                        : std::string();
  };
  for (const c10::IValue& v : stack) {
    std::string found;
    if (v.isTensor()) {
      found = check(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        found = check(t);
        if (!found.empty()) break;
      }
    }
    if (!found.empty()) return found;
  }
  return "";
}

void released_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string who = released_argument(*stack);
  note_local_error();
  throw std::runtime_error(
      "fsdp: " + op.schema().name() + " used " +
      (who.empty() ? std::string("a parameter whose model fsdp sharded") : "parameter " + who) +
      " while it is sharded: a unit's full parameters exist only while it runs, inside "
      "fsdp::forward and the backward that follows (its model's FullyShardedModel alive). Call "
      "every wrapped module through fsdp::forward(module, ...), also from its parent's forward, "
      "never directly; between steps read parameters through "
      "FullyShardedModel::gather_full_params()");
}

// Sets `param`'s data without dispatching on the released key (set_data is an op: on a released
// parameter it would reach the fallback).
void swap_data(at::Tensor& param, const at::Tensor& data) {
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard bypass(kReleasedKey);
  param.set_data(data);
}

// `view`'s storage, sizes, strides and offset, with the released key added.
at::Tensor twin_of(const at::Tensor& view) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(view.storage()), view.key_set() | c10::DispatchKeySet(kReleasedKey),
      view.dtype());
  impl->set_sizes_and_strides(view.sizes(), view.strides());
  impl->set_storage_offset(view.storage_offset());
  return at::Tensor(std::move(impl));
}

}  // namespace

TORCH_LIBRARY_IMPL(_, DeferredInit, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&released_fallback>());
}

ParamGuard::ParamGuard(at::Tensor param, at::Tensor view, std::string name, std::string unit)
    : param_(std::move(param)), view_(std::move(view)), twin_(twin_of(view_)) {
  ReleasedNames& r = released_names();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.names[param_.unsafeGetTensorImpl()] = "'" + name + "' (unit '" + unit + "')";
}

ParamGuard::ParamGuard(ParamGuard&& other) noexcept
    : param_(std::move(other.param_)),
      view_(std::move(other.view_)),
      twin_(std::move(other.twin_)) {
  other.param_.reset();
}

ParamGuard& ParamGuard::operator=(ParamGuard&& other) noexcept {
  if (this != &other) {
    release();
    param_ = std::move(other.param_);
    view_ = std::move(other.view_);
    twin_ = std::move(other.twin_);
    other.param_.reset();
  }
  return *this;
}

ParamGuard::~ParamGuard() { release(); }

void ParamGuard::release() noexcept {
  if (!param_.defined()) return;
  ReleasedNames& r = released_names();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.names.erase(param_.unsafeGetTensorImpl());
  param_.reset();
}

void ParamGuard::show() { swap_data(param_, view_); }

void ParamGuard::hide() { swap_data(param_, twin_); }

bool is_released_param(const at::Tensor& t) { return t.defined() && t.key_set().has(kReleasedKey); }

}  // namespace fsdp
