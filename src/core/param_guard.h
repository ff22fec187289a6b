// Guards on parameters whose full values are released. A resharded unit's parameters keep their
// TensorImpl, sizes and storage object, but the storage has no bytes; an op that read them would
// walk a null pointer (a segfault inside TensorIterator) or fail in LibTorch's storage-size words.
// While released, a parameter's data is instead a twin of its view that carries one more dispatch
// key, DeferredInit (torchdistx's out-of-core key, which nothing in LibTorch implements), whose
// fallback throws fsdp's error naming the parameter, its unit and how to read it. Metadata stays
// readable (sizes, dtype, device, requires_grad, grad); every dispatched op fails, before
// autograd or any kernel sees the tensor. See docs/design.md, [Note: released parameters].
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace fsdp {

class ParamGuard {
 public:
  ParamGuard() = default;
  // `param`: the module's parameter; `view`: its data while gathered (a view of its unit's full
  // buffer). Registers the parameter's name and unit for the error.
  ParamGuard(at::Tensor param, at::Tensor view, std::string name, std::string unit);
  ParamGuard(ParamGuard&& other) noexcept;
  ParamGuard& operator=(ParamGuard&& other) noexcept;
  ParamGuard(const ParamGuard&) = delete;
  ParamGuard& operator=(const ParamGuard&) = delete;
  // Forgets the name: the parameter stays guarded if released (its model is gone), and an op on
  // it then fails naming no parameter.
  ~ParamGuard();

  void show();  // the parameter's data is its view (its unit is gathered)
  void hide();  // the parameter's data is the guarded twin (its unit is sharded)

 private:
  void release() noexcept;
  at::Tensor param_, view_, twin_;
};

// Whether `t` is a guarded (released) parameter.
bool is_released_param(const at::Tensor& t);

}  // namespace fsdp
