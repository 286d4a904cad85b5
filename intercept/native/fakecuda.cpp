// Fake CUDA runtime for a CPU-only PyTorch build (checked against torch 2.13.0).
//
// Loaded with ctypes.CDLL(..., RTLD_GLOBAL) *before* `import torch` (see intercept/shim.py), it
// registers
//   * a CUDA DeviceGuardImpl: devices, per-thread current device and stream, stream pools and
//     events, so that device guards, torch.Stream/torch.Event('cuda') and the autograd engine's
//     cross-stream synchronisation work;
//   * CUDA hooks under the registry key "CUDAHooks" whose isBuilt() is true, so that
//     at::getAccelerator() == CUDA (the autograd engine and accelerator API need it). The key
//     must be the literal "CUDAHooks": torch looks the hooks up by that name once, during
//     `import torch`, which is why the library has to be loaded first.
//
// Nothing runs on a GPU. Every event and synchronisation is forwarded to one callback that the
// Python side installs (fakecuda_set_callback); it talks to the simulator's RankRuntime. Without
// a callback, events complete at once and synchronisations return immediately.

#include <ATen/DeviceAccelerator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;
using c10::StreamId;

constexpr int kMaxDevices = 64;
// Like c10/cuda/CUDAStream.cpp: each device has a pool of 32 streams per priority, handed out
// round robin, so a script creating many streams reuses the same few ids.
constexpr StreamId kStreamsPerPool = 32;

// What the Python callback is asked to do (mirrored by intercept.shim.CallbackOp).
enum CallbackOp : int {
  kNewEvent = 0,      // () -> new event id (>= 0)
  kRecordEvent = 1,   // (event, stream) -> 0
  kWaitEvent = 2,     // (stream, event) -> 0
  kSyncDevice = 3,    // () -> completion time (ns)
  kSyncStream = 4,    // (stream) -> completion time (ns)
  kSyncEvent = 5,     // (event) -> completion time (ns)
  kQueryEvent = 6,    // (event) -> 1 if completed, else 0
  kQueryStream = 7,   // (stream) -> 1 if idle, else 0
};
// A negative return value means the Python side raised; it has already printed the traceback.
using Callback = int64_t (*)(int op, int64_t a, int64_t b);

std::atomic<int> g_device_count{8};
std::atomic<Callback> g_callback{nullptr};
std::atomic<int64_t> g_local_events{0};
std::array<std::array<std::atomic<StreamId>, 2>, kMaxDevices> g_pool_next{};
thread_local DeviceIndex t_device = 0;
thread_local std::array<StreamId, kMaxDevices> t_streams{};

int64_t call(CallbackOp op, int64_t a = 0, int64_t b = 0) {
  Callback cb = g_callback.load();
  if (cb == nullptr) {
    switch (op) {
      case kNewEvent: return g_local_events++;
      case kQueryEvent:
      case kQueryStream: return 1;
      default: return 0;
    }
  }
  int64_t result = cb(op, a, b);
  TORCH_CHECK(result >= 0, "phantora fake CUDA: the simulator runtime failed during a CUDA ",
              "stream/event call (its Python traceback is printed above)");
  return result;
}

DeviceIndex resolve(DeviceIndex index) {
  DeviceIndex i = index < 0 ? t_device : index;
  TORCH_CHECK(i < g_device_count.load() && i < kMaxDevices, "CUDA error: invalid device ordinal ",
              static_cast<int>(i), " (the simulated host has ", g_device_count.load(), " GPUs)");
  return i;
}

// Events live on the Python side. The c10 event slot holds (id + 1) * 2 + timing, so that nullptr
// keeps meaning "never recorded" and elapsedTime can refuse events made without enable_timing,
// as CUDA does.
void* event_slot(int64_t id, bool timing) {
  return reinterpret_cast<void*>(static_cast<intptr_t>((id + 1) * 2 + (timing ? 1 : 0)));
}
int64_t event_id(void* event) { return reinterpret_cast<intptr_t>(event) / 2 - 1; }
bool event_timing(void* event) { return (reinterpret_cast<intptr_t>(event) & 1) != 0; }

Stream make_stream(DeviceIndex index, StreamId id) {
  return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, index), id);
}

struct FakeCudaGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    setDevice(d);
    return old;
  }
  Device getDevice() const override { return Device(DeviceType::CUDA, t_device); }
  void setDevice(Device d) const override {
    if (d.index() >= 0) t_device = resolve(d.index());
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kMaxDevices) t_device = d.index();
  }
  Stream getStream(Device d) const noexcept override {
    DeviceIndex i = d.index() < 0 ? t_device : d.index();
    return make_stream(i, t_streams[i]);
  }
  Stream getDefaultStream(Device d) const override { return make_stream(resolve(d.index()), 0); }
  Stream getNewStream(Device d, int priority = 0) const override {
    DeviceIndex i = resolve(d.index());
    int pool = priority < 0 ? 1 : 0;
    StreamId slot = g_pool_next[i][pool]++ % kStreamsPerPool;
    return make_stream(i, 1 + pool * kStreamsPerPool + slot);
  }
  Stream getStreamFromGlobalPool(Device d, bool high_priority = false) const override {
    return getNewStream(d, high_priority ? -1 : 0);
  }
  Stream exchangeStream(Stream s) const noexcept override {
    DeviceIndex i = s.device_index();
    StreamId old = t_streams[i];
    t_streams[i] = s.id();
    return make_stream(i, old);
  }
  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(g_device_count.load());
  }
  c10::DeviceCapability getDeviceCapability(Device) const override { return {}; }

  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  void record(void** event, const Stream& stream, const DeviceIndex,
              const c10::EventFlag flag) const override {
    // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT, as with cudaEventDefault.
    if (*event == nullptr) *event = event_slot(call(kNewEvent), flag == c10::EventFlag::BACKEND_DEFAULT);
    call(kRecordEvent, event_id(*event), stream.id());
  }
  void block(void* event, const Stream& stream) const override {
    if (event != nullptr) call(kWaitEvent, stream.id(), event_id(event));
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || call(kQueryEvent, event_id(event)) != 0;
  }
  bool queryStream(const Stream& stream) const override { return call(kQueryStream, stream.id()) != 0; }
  void synchronizeStream(const Stream& stream) const override { call(kSyncStream, stream.id()); }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) call(kSyncEvent, event_id(event));
  }
  void synchronizeDevice(const DeviceIndex) const override { call(kSyncDevice); }
  void recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const override {}
  // Milliseconds of virtual time, like cudaEventElapsedTime; blocks until both have completed.
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(event_timing(start) && event_timing(end),
                "Both events must be created with argument 'enable_timing=True'.");
    int64_t start_ns = call(kSyncEvent, event_id(start));
    int64_t end_ns = call(kSyncEvent, event_id(end));
    return static_cast<double>(end_ns - start_ns) / 1e6;
  }
};

FakeCudaGuard g_guard;

struct FakeCudaHooks final : public at::CUDAHooksInterface {
  explicit FakeCudaHooks(at::CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  void init() const override {}
  DeviceIndex deviceCount() const override { return g_guard.deviceCount(); }
  int getNumGPUs() const override { return g_device_count.load(); }
  void setCurrentDevice(DeviceIndex d) const override { g_guard.setDevice(Device(DeviceType::CUDA, d)); }
  DeviceIndex getCurrentDevice() const override { return t_device; }
  DeviceIndex current_device() const override { return t_device; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    return g_guard.exchangeDevice(Device(DeviceType::CUDA, d)).index();
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  void deviceSynchronize(DeviceIndex) const override { call(kSyncDevice); }
};

struct Installer {
  Installer() { c10::impl::registerDeviceGuard(DeviceType::CUDA, &g_guard); }
} g_installer;

}  // namespace

namespace at {
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", FakeCudaHooks)
}

extern "C" {
void fakecuda_set_device_count(int n) { g_device_count = n; }
void fakecuda_set_callback(Callback cb) { g_callback = cb; }
// Returns -1 (and changes nothing) for an index the simulated host does not have.
int fakecuda_set_device(int index) {
  if (index < 0 || index >= g_device_count.load() || index >= kMaxDevices) return -1;
  t_device = static_cast<DeviceIndex>(index);
  return 0;
}
int fakecuda_current_device() { return t_device; }
// The calling thread's current stream on `device` (-1: the current device).
int64_t fakecuda_current_stream(int device) {
  return t_streams[device < 0 || device >= kMaxDevices ? t_device : device];
}
// torch.Event.elapsed_time insists on an exact torch.Event argument, so torch.cuda.Event (a
// subclass) measures through here, from the events' slots (torch.Event.event_id). Returns 0 and
// sets *ms, or -1 with the error message in `error`.
int fakecuda_elapsed_time(int64_t start, int64_t end, double* ms, char* error, int error_size) {
  try {
    *ms = g_guard.elapsedTime(reinterpret_cast<void*>(static_cast<intptr_t>(start)),
                              reinterpret_cast<void*>(static_cast<intptr_t>(end)), t_device);
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(error, error_size, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
  }
  return -1;
}
int fakecuda_accelerator_is_cuda() {
  auto acc = at::getAccelerator(false);
  return acc.has_value() && *acc == DeviceType::CUDA;
}
}
