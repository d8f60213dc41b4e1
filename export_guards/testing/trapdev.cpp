// A test-only PrivateUse1 device whose pointers fault when the host reads them.
//
// Every allocation reserves two mappings of the same size: an address range mapped
// PROT_NONE, which is what tensors report as data_ptr(), and a host-readable range that
// holds the bytes. Only this backend's own copy kernels translate one into the other, so a
// raw host read of data_ptr() (ctypes, memcpy, numpy) dies with SIGSEGV exactly as it does
// on a CUDA pointer. Every other operator runs on the CPU through the boxed CPU fallback.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <cstring>
#include <map>
#include <mutex>

namespace {

struct Block {
  char* host;
  size_t size;
};

// Never destroyed: tensors may be freed during interpreter shutdown, after static destructors.
std::mutex& blocks_mutex = *new std::mutex;
std::map<uintptr_t, Block>& blocks = *new std::map<uintptr_t, Block>;  // keyed by the PROT_NONE range's start

// Host address of the byte that `device_ptr` names (which may point inside a block).
char* host_address(const void* device_ptr) {
  const auto address = reinterpret_cast<uintptr_t>(device_ptr);
  std::lock_guard<std::mutex> lock(blocks_mutex);
  auto it = blocks.upper_bound(address);
  TORCH_CHECK(it != blocks.begin(), "trapdev: unknown device pointer");
  --it;
  TORCH_CHECK(address < it->first + it->second.size || it->second.size == 0,
              "trapdev: device pointer outside its allocation");
  return it->second.host + (address - it->first);
}

void release(void* device_ptr) {
  if (device_ptr == nullptr) {
    return;
  }
  Block block{};
  {
    std::lock_guard<std::mutex> lock(blocks_mutex);
    auto it = blocks.find(reinterpret_cast<uintptr_t>(device_ptr));
    if (it == blocks.end()) {
      return;
    }
    block = it->second;
    blocks.erase(it);
  }
  munmap(device_ptr, block.size);
  munmap(block.host, block.size);
}

struct TrapAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device device(c10::DeviceType::PrivateUse1, 0);
    if (nbytes == 0) {
      return {nullptr, nullptr, &release, device};
    }
    void* trap = mmap(nullptr, nbytes, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(trap != MAP_FAILED, "trapdev: cannot reserve ", nbytes, " bytes");
    void* host = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (host == MAP_FAILED) {
      munmap(trap, nbytes);
      TORCH_CHECK(false, "trapdev: out of memory allocating ", nbytes, " bytes");
    }
    {
      std::lock_guard<std::mutex> lock(blocks_mutex);
      blocks[reinterpret_cast<uintptr_t>(trap)] = Block{static_cast<char*>(host), nbytes};
    }
    return {trap, trap, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) {
      std::memcpy(host_address(dest), host_address(src), count);
    }
  }
};

TrapAllocator trap_allocator;

constexpr c10::DispatchKeySet kTrapKeys(c10::DispatchKey::PrivateUse1);

// A CPU tensor that aliases the bytes of a trapdev tensor, for this backend's kernels only.
at::Tensor host_alias(const at::Tensor& tensor) {
  if (tensor.is_cpu()) {
    return tensor;
  }
  auto options = tensor.options().device(at::kCPU);
  if (tensor.storage().nbytes() == 0) {
    return at::empty_strided(tensor.sizes(), tensor.strides(), options);
  }
  char* base = host_address(tensor.storage().data_ptr().get());
  return at::from_blob(base + tensor.storage_offset() * tensor.element_size(),
                       tensor.sizes(), tensor.strides(), options);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device>,
                               std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &trap_allocator, kTrapKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &trap_allocator, kTrapKeys,
                                           c10::dtype_or_default(dtype));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  if (self.numel() != 0) {
    host_alias(dst).copy_(host_alias(self));
  }
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  const size_t needed = at::detail::computeStorageNbytesContiguous(
      size, self.element_size(), self.storage_offset());
  auto storage = self.storage();
  if (needed > storage.nbytes()) {
    auto grown = trap_allocator.allocate(needed);
    if (storage.nbytes() != 0) {
      trap_allocator.copy_data(grown.get(), storage.data_ptr().get(), storage.nbytes());
    }
    storage.set_data_ptr_noswap(std::move(grown));
    storage.set_nbytes(needed);
  }
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  auto shape = at::infer_size_dv(size, self.numel());
  auto stride = at::detail::computeStride(self.sizes(), self.strides(), shape);
  TORCH_CHECK(stride.has_value(), "trapdev: view size is not compatible with the input's strides");
  return self.as_strided(shape, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return self.as_strided(size, stride, self.storage_offset());
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

// Backends other than CPU and CUDA reach convolution through this hook, which has a
// composite kernel that throws, so the boxed CPU fallback never sees it.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) {
    host_bias = bias->cpu();
  }
  return at::convolution(input.cpu(), weight.cpu(), host_bias, stride, padding, dilation,
                         transposed, output_padding, groups)
      .to(input.device());
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(host_alias(self));
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &trap_allocator);
C10_REGISTER_GUARD_IMPL(PrivateUse1, c10::impl::NoOpDeviceGuardImpl<c10::DeviceType::PrivateUse1>);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("convolution_overrideable", convolution_overrideable);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}
