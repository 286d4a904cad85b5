// Fake CUDA runtime for a CPU-only PyTorch build (checked against torch 2.13.0).
//
// Loaded with ctypes.CDLL(..., RTLD_GLOBAL) *before* `import torch` (see intercept/process/shim.py), it
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
//
// It also accounts the CPU time the simulator spends on each thread ("excluded" from the rank's
// virtual time, see intercept/host_time/clock.py), in one place for Python and C++:
//   * excluded sections that Python opens (fakecuda_exclusion_enter/exit: VirtualClock.excluded);
//   * every call from torch's C++ into Python through the interpreter's vtable
//     (fakecuda_exclude_interpreter_callbacks): __torch_dispatch__ of the fake mode, the
//     metadata queries (prim.device) C++ makes of a FakeTensor, and the decrefs through which
//     C++ releases (and deallocates) the FakeTensors it kept, GIL hand-overs included;
//   * every call of the stream/event callback below;
//   * measured deductions (fakecuda_set_deductions) for what runs outside all of those: what
//     timing a section costs, and the C++ glue around each op dispatch into Python.
// Sections nest per thread (only the outermost is timed, with the thread's CPU clock).
//
// And it counts the script's Python work outside those sections (fakecuda_count_thread): lines
// and calls of Python code, which a real host runs too and whose count, unlike CPU time, does
// not depend on the machine or its load (intercept/host_time/python_work.py converts them into a reference
// host's time), apart inside the hot walks it is given (fakecuda_set_hot_code). A Python frame that
// opens an excluded section (the `with` of a stand-in) is the simulator's: what it counted since
// it was called is given back (fakecuda_exclusion_enter_for_caller).

#include <Python.h>

#include <ATen/DeviceAccelerator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/PyInterpreter.h>
#include <c10/core/impl/PyInterpreterHooks.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <vector>

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

// What the Python callback is asked to do (mirrored by intercept.process.shim.CallbackOp).
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

// ---- CPU time the simulator spends: excluded from the rank's virtual time ------------------

int64_t thread_cpu_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One per thread, registered in g_threads from its first section until the thread ends.
// `depth`, `excluded_ns` and `mark_ns` are only touched by their own thread; other threads read
// `clock` and `entry_ns` (under g_threads_mutex, which only guards the registry) to add an open
// section to fakecuda_excluded_ns. Entering and leaving take no lock: an exclusion wraps every
// call into Python, ~25k per GPT-2 step. Trivially destructible, so that calls from C++ during a
// thread's (or the process's) teardown can still use it.
constexpr int64_t kClosed = -1;

struct ThreadExclusion {
  bool registered = false;
  clockid_t clock{};
  int depth = 0;
  int64_t excluded_ns = 0;        // this thread's closed sections plus its deductions
  int64_t section_mark_ns = 0;    // its counted CPU right after its last section deduction
  int64_t dispatch_mark_ns = 0;   // its counted CPU right after its last dispatch deduction
  int64_t sections = 0;           // outermost sections entered (the simulator ran: an op, a sync)
  std::atomic<int64_t> entry_ns{kClosed};  // thread CPU when the open outermost section began
};

pthread_mutex_t g_threads_mutex = PTHREAD_MUTEX_INITIALIZER;
// Never destroyed: tensors are released (and their Python objects decref'd through
// ExcludingInterpreter) until the very end of the process.
std::vector<ThreadExclusion*>& g_threads = *new std::vector<ThreadExclusion*>();
std::atomic<int64_t> g_closed_ns{0};    // closed sections and deductions, all threads
std::atomic<int64_t> g_section_deduction_ns{0};   // per outermost section
std::atomic<int64_t> g_dispatch_deduction_ns{0};  // per outermost op dispatch

thread_local ThreadExclusion t_exclusion;

// Takes the thread's ThreadExclusion out of the registry when the thread ends.
struct Unregister {
  ~Unregister() {
    pthread_mutex_lock(&g_threads_mutex);
    auto it = std::find(g_threads.begin(), g_threads.end(), &t_exclusion);
    if (it != g_threads.end()) g_threads.erase(it);
    pthread_mutex_unlock(&g_threads_mutex);
  }
};

ThreadExclusion& this_thread_exclusion() {
  ThreadExclusion& t = t_exclusion;
  if (!t.registered) {
    t.registered = true;
    pthread_getcpuclockid(pthread_self(), &t.clock);
    pthread_mutex_lock(&g_threads_mutex);
    g_threads.push_back(&t);
    pthread_mutex_unlock(&g_threads_mutex);
    static thread_local Unregister unregister;
    (void)unregister;
  }
  return t;
}

// Deductions: CPU time the simulator spends on a thread between its sections, which no section
// can cover, as measured: `section` per outermost section (what timing it costs: the halves of
// the two clock reads outside it), plus `dispatch` per op dispatch (the C++ glue around the call
// into Python). Each kind takes at most the counted CPU time the thread spent since that kind's
// previous deduction, so a deduction only takes back time that was spent, by the thread that
// spent it, and the two kinds never take the same time twice.
int64_t deduct(ThreadExclusion& t, int64_t now_ns, int64_t want_ns, int64_t& mark_ns) {
  int64_t counted_ns = now_ns - t.excluded_ns;
  int64_t take_ns = std::clamp<int64_t>(counted_ns - mark_ns, 0, want_ns);
  t.excluded_ns += take_ns;
  mark_ns = counted_ns - take_ns;
  return take_ns;
}

void exclusion_enter(bool op_dispatch) {
  ThreadExclusion& t = this_thread_exclusion();
  if (t.depth++ > 0) return;
  ++t.sections;
  int64_t now_ns = thread_cpu_ns(t.clock);
  int64_t take_ns = deduct(t, now_ns, g_section_deduction_ns.load(), t.section_mark_ns);
  if (op_dispatch) take_ns += deduct(t, now_ns, g_dispatch_deduction_ns.load(), t.dispatch_mark_ns);
  if (take_ns > 0) g_closed_ns += take_ns;
  t.entry_ns.store(now_ns);
}

void exclusion_exit() {
  ThreadExclusion& t = this_thread_exclusion();
  if (t.depth == 0 || --t.depth > 0) return;  // depth 0: a section opened before a fork
  int64_t spent_ns = thread_cpu_ns(t.clock) - t.entry_ns.load();
  t.excluded_ns += spent_ns;
  // Closed total first, then the section closes: a concurrent reader may count this section
  // twice for an instant (a reading a little early), never not at all (one too late).
  g_closed_ns += spent_ns;
  t.entry_ns.store(kClosed);
}

// Leave every open section of the calling thread (returns their depth), and re-enter them:
// CPU time in between is the script's even inside a simulator callback.
int exclusion_suspend() {
  ThreadExclusion& t = this_thread_exclusion();
  int depth = t.depth;
  if (depth > 0) {
    t.depth = 1;
    exclusion_exit();
  }
  return depth;
}

void exclusion_resume(int depth) {
  if (depth <= 0) return;
  exclusion_enter(false);
  this_thread_exclusion().depth = depth;
}

// ---- The script's Python work, counted (machine-independent; see the header) ------------------

// Lines started and Python functions entered on counted threads outside excluded sections, all
// threads together. Only touched with the GIL held; atomics so that readers never tear. The
// "hot" pair counts what ran inside a hot walk (below), the other pair everything else.
std::atomic<int64_t> g_work_lines{0};
std::atomic<int64_t> g_work_calls{0};
std::atomic<int64_t> g_hot_lines{0};
std::atomic<int64_t> g_hot_calls{0};

// Hot walks: the code objects (fakecuda_set_hot_code; the Python side keeps them alive) of
// generator walks (nn.Module's member walks) that a real host runs hot when their steps follow
// one another with no op between them. A walk step is what a thread runs from a call of one's
// frame (a generator's resume) until the last such frame on its stack returns (or yields). It
// counts as hot work unless the thread entered an excluded section (the simulator ran an op, a
// sync, ...) since its previous walk step ended: then the whole step runs cold, as the script.
std::vector<const PyObject*> g_hot_code;
thread_local int t_hot_depth = 0;              // hot walk frames on the thread's stack
thread_local bool t_hot_step_cold = false;     // the current walk step follows an op
thread_local int64_t t_hot_step_end_mark = -1;  // sections entered when the last step ended

bool is_hot_code(PyFrameObject* frame) {
  if (g_hot_code.empty()) return false;
  PyCodeObject* code = PyFrame_GetCode(frame);
  bool hot = std::find(g_hot_code.begin(), g_hot_code.end(),
                       reinterpret_cast<PyObject*>(code)) != g_hot_code.end();
  Py_DECREF(code);
  return hot;
}

// What one counted thread has counted so far (lines, calls; outside and inside hot walks), and
// its Python frames, innermost last, each with those totals when it was called. A frame that
// enters an excluded section through Python (fakecuda_exclusion_enter_for_caller: the `with` of
// NativeExclusion) is the simulator's own code, not the script's (the time functions' stand-ins,
// torch.cuda.synchronize's, the c10d wrappers, the process-group backend called from C++): the
// work counted since it was called, its own lines and what it called on the way in, is given
// back (refund_frame).
struct WorkTotals {
  int64_t lines = 0, calls = 0, hot_lines = 0, hot_calls = 0;
};
struct CountedFrame {
  PyFrameObject* frame;  // borrowed: only compared, never dereferenced
  WorkTotals at_call;
};
thread_local WorkTotals t_counted;
thread_local std::vector<CountedFrame> t_frames;
constexpr size_t kFrameSearch = 8;  // frames a return looks down for its own (missed returns)

void frame_returned(PyFrameObject* frame) {
  size_t n = t_frames.size();
  for (size_t i = 0; i < std::min(n, kFrameSearch); ++i) {
    if (t_frames[n - 1 - i].frame == frame) {
      t_frames.resize(n - 1 - i);
      return;
    }
  }
}

// Give back what the thread counted since `frame` was called (see WorkTotals); it and the frames
// it called count from now on.
void refund_frame(PyFrameObject* frame) {
  size_t i = t_frames.size();
  while (i > 0 && t_frames[i - 1].frame != frame) --i;
  if (i == 0) return;  // not called while counted
  WorkTotals& mark = t_frames[i - 1].at_call;
  WorkTotals& now = t_counted;
  g_work_lines.fetch_sub(now.lines - mark.lines, std::memory_order_relaxed);
  g_work_calls.fetch_sub(now.calls - mark.calls, std::memory_order_relaxed);
  g_hot_lines.fetch_sub(now.hot_lines - mark.hot_lines, std::memory_order_relaxed);
  g_hot_calls.fetch_sub(now.hot_calls - mark.hot_calls, std::memory_order_relaxed);
  now = mark;
  for (size_t j = i - 1; j < t_frames.size(); ++j) t_frames[j].at_call = mark;
}

// A trace function (PyEval_SetTrace) of a counted thread: counts only outside excluded sections.
// It follows hot walks inside them too, so that a walk's call and return always pair up.
int count_work(PyObject*, PyFrameObject* frame, int what, PyObject*) {
  if (what == PyTrace_CALL) {
    if (is_hot_code(frame) && t_hot_depth++ == 0) {
      t_hot_step_cold = t_exclusion.sections != t_hot_step_end_mark;
    }
  } else if (what == PyTrace_RETURN) {
    frame_returned(frame);
    if (t_hot_depth > 0 && is_hot_code(frame) && --t_hot_depth == 0) {
      t_hot_step_end_mark = t_exclusion.sections;
    }
    return 0;
  }
  if (t_exclusion.depth > 0) return 0;  // frames called in a section are not followed
  bool hot = t_hot_depth > 0 && !t_hot_step_cold;
  if (what == PyTrace_LINE) {
    (hot ? g_hot_lines : g_work_lines).fetch_add(1, std::memory_order_relaxed);
    ++(hot ? t_counted.hot_lines : t_counted.lines);
  } else if (what == PyTrace_CALL) {
    t_frames.push_back({frame, t_counted});
    (hot ? g_hot_calls : g_work_calls).fetch_add(1, std::memory_order_relaxed);
    ++(hot ? t_counted.hot_calls : t_counted.calls);
  }
  return 0;
}

// RAII: exceptions (a Python error surfacing as c10::Error) close the section too.
struct Excluded {
  explicit Excluded(bool op_dispatch = false) { exclusion_enter(op_dispatch); }
  ~Excluded() { exclusion_exit(); }
  Excluded(const Excluded&) = delete;
  Excluded& operator=(const Excluded&) = delete;
};

// One entry per open op dispatch (DispatchSection) on this thread, innermost last: the depth of
// sections its exclusion was suspended at (fakecuda_count_rest_of_dispatch), or -1. A plain
// array, trivially destructible like ThreadExclusion; dispatches nested deeper than it holds
// stay excluded whole.
constexpr int kMaxDispatchFrames = 256;
thread_local int t_dispatch_suspended[kMaxDispatchFrames];
thread_local int t_dispatch_frames = 0;

// RAII around one call of torch's C++ into __torch_dispatch__: excluded, with the dispatch
// deduction, unless Python hands the rest of it to the script (a tensor subclass's dispatch).
struct DispatchSection {
  DispatchSection() {
    exclusion_enter(/*op_dispatch=*/true);
    if (t_dispatch_frames < kMaxDispatchFrames) t_dispatch_suspended[t_dispatch_frames] = -1;
    ++t_dispatch_frames;
  }
  ~DispatchSection() {
    --t_dispatch_frames;
    if (t_dispatch_frames < kMaxDispatchFrames) {
      // re-enter the suspended sections, to leave them as they were entered
      exclusion_resume(t_dispatch_suspended[t_dispatch_frames]);
    }
    exclusion_exit();
  }
  DispatchSection(const DispatchSection&) = delete;
  DispatchSection& operator=(const DispatchSection&) = delete;
};

// In a forked child only the forking thread lives on, with a fresh CPU clock; the mutex may have
// been held by a thread that is gone.
void exclusion_after_fork_in_child() {
  pthread_mutex_init(&g_threads_mutex, nullptr);
  ThreadExclusion& t = t_exclusion;
  g_threads.clear();
  if (!t.registered) return;
  g_threads.push_back(&t);
  pthread_getcpuclockid(pthread_self(), &t.clock);
  t.excluded_ns = t.section_mark_ns = t.dispatch_mark_ns = 0;
  if (t.depth > 0) t.entry_ns.store(thread_cpu_ns(t.clock));
}

// Forwards every call to torch's own interpreter vtable; the calls that run Python on torch's
// behalf (dispatch, metadata queries, detach, hooks) run inside an excluded section, and so does
// decref: C++ drops the last reference of a tensor whose Python object it keeps (every FakeTensor
// an op returned; a real GPU host's intermediate tensors have none), which takes the GIL and
// deallocates a FakeTensor and its bookkeeping in Python.
class ExcludingInterpreter final : public c10::impl::PyInterpreterVTable {
 public:
  explicit ExcludingInterpreter(const c10::impl::PyInterpreterVTable* inner) : inner_(inner) {}

  std::string name() const override { return inner_->name(); }
  void incref(PyObject* pyobj) const override { inner_->incref(pyobj); }
  void decref(PyObject* pyobj) const override {
    callback([&] { inner_->decref(pyobj); });
  }
  bool try_incref(const c10::impl::PyObjectSlot& slot) const override {
    return inner_->try_incref(slot);
  }
  size_t refcnt(PyObject* pyobj) const override { return inner_->refcnt(pyobj); }

  c10::intrusive_ptr<c10::TensorImpl> detach(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->detach(self); });
  }
  void dispatch(const c10::OperatorHandle& op, torch::jit::Stack* stack) const override {
    DispatchSection section;
    inner_->dispatch(op, stack);
  }
  void reportErrorCallback(PyObject* callback_object, c10::DispatchKey key) const override {
    callback([&] { inner_->reportErrorCallback(callback_object, key); });
  }
  void python_op_registration_trampoline(const c10::OperatorHandle& op, c10::DispatchKey key,
                                         c10::DispatchKeySet keyset, torch::jit::Stack* stack,
                                         bool with_keyset, bool with_op) const override {
    callback([&] {
      inner_->python_op_registration_trampoline(op, key, keyset, stack, with_keyset, with_op);
    });
  }
  void throw_abstract_impl_not_imported_error(std::string opname, const char* pymodule,
                                              const char* context) const override {
    inner_->throw_abstract_impl_not_imported_error(std::move(opname), pymodule, context);
  }
  void python_dispatcher(const c10::OperatorHandle& op, c10::DispatchKeySet keyset,
                         torch::jit::Stack* stack) const override {
    callback([&] { inner_->python_dispatcher(op, keyset, stack); });
  }

  bool is_contiguous(const c10::TensorImpl* self, at::MemoryFormat format) const override {
    return callback([&] { return inner_->is_contiguous(self, format); });
  }
  c10::SymBool sym_is_contiguous(const c10::TensorImpl* self,
                                 at::MemoryFormat format) const override {
    return callback([&] { return inner_->sym_is_contiguous(self, format); });
  }
  bool is_strides_like(const c10::TensorImpl* self, at::MemoryFormat format) const override {
    return callback([&] { return inner_->is_strides_like(self, format); });
  }
  bool is_non_overlapping_and_dense(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->is_non_overlapping_and_dense(self); });
  }
  c10::Device device(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->device(self); });
  }
  int64_t dim(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->dim(self); });
  }
  c10::IntArrayRef strides(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->strides(self); });
  }
  c10::IntArrayRef sizes(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->sizes(self); });
  }
  c10::SymIntArrayRef sym_sizes(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->sym_sizes(self); });
  }
  c10::Layout layout(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->layout(self); });
  }
  int64_t numel(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->numel(self); });
  }
  c10::SymInt sym_numel(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->sym_numel(self); });
  }
  c10::SymIntArrayRef sym_strides(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->sym_strides(self); });
  }
  c10::SymInt sym_storage_offset(const c10::TensorImpl* self) const override {
    return callback([&] { return inner_->sym_storage_offset(self); });
  }

  void trace_gpu_event_creation(c10::DeviceType type, uintptr_t event) const override {
    callback([&] { inner_->trace_gpu_event_creation(type, event); });
  }
  void trace_gpu_event_deletion(c10::DeviceType type, uintptr_t event) const override {
    callback([&] { inner_->trace_gpu_event_deletion(type, event); });
  }
  void trace_gpu_event_record(c10::DeviceType type, uintptr_t event,
                              uintptr_t stream) const override {
    callback([&] { inner_->trace_gpu_event_record(type, event, stream); });
  }
  void trace_gpu_event_wait(c10::DeviceType type, uintptr_t event,
                            uintptr_t stream) const override {
    callback([&] { inner_->trace_gpu_event_wait(type, event, stream); });
  }
  void trace_gpu_memory_allocation(c10::DeviceType type, uintptr_t ptr) const override {
    callback([&] { inner_->trace_gpu_memory_allocation(type, ptr); });
  }
  void trace_gpu_memory_deallocation(c10::DeviceType type, uintptr_t ptr) const override {
    callback([&] { inner_->trace_gpu_memory_deallocation(type, ptr); });
  }
  void trace_gpu_stream_creation(c10::DeviceType type, uintptr_t stream) const override {
    callback([&] { inner_->trace_gpu_stream_creation(type, stream); });
  }
  void trace_gpu_device_synchronization(c10::DeviceType type) const override {
    callback([&] { inner_->trace_gpu_device_synchronization(type); });
  }
  void trace_gpu_stream_synchronization(c10::DeviceType type, uintptr_t stream) const override {
    callback([&] { inner_->trace_gpu_stream_synchronization(type, stream); });
  }
  void trace_gpu_event_synchronization(c10::DeviceType type, uintptr_t event) const override {
    callback([&] { inner_->trace_gpu_event_synchronization(type, event); });
  }
  void reset_backward_hooks(const c10::TensorImpl* self) const override {
    callback([&] { inner_->reset_backward_hooks(self); });
  }

 private:
  template <typename F>
  static auto callback(F&& f) -> decltype(f()) {
    Excluded section;
    return f();
  }

  const c10::impl::PyInterpreterVTable* inner_;
};

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
  int64_t result;
  {
    Excluded section;  // the ctypes trampoline and the simulator's bookkeeping
    result = cb(op, a, b);
  }
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
  Installer() {
    c10::impl::registerDeviceGuard(DeviceType::CUDA, &g_guard);
    pthread_atfork(nullptr, nullptr, exclusion_after_fork_in_child);
  }
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

// Route torch's calls into Python through ExcludingInterpreter; once torch is imported (its
// interpreter exists from then on). Idempotent.
void fakecuda_exclude_interpreter_callbacks() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  c10::impl::PyInterpreter* interpreter = c10::impl::getGlobalPyInterpreter();
  // Never freed: tensors may call through it until the process ends.
  interpreter->vtable_ = new ExcludingInterpreter(interpreter->vtable_);
}
// Open / close an excluded section on the calling thread (nestable).
void fakecuda_exclusion_enter() { exclusion_enter(false); }
// Open one from Python, from a method (NativeExclusion.__enter__) whose caller runs the `with`:
// an outermost section gives back the Python work counted since that caller was called
// (refund_frame). Needs the GIL: call through a PyDLL.
void fakecuda_exclusion_enter_for_caller() {
  if (this_thread_exclusion().depth == 0) {
    PyFrameObject* method = PyEval_GetFrame();  // borrowed
    PyFrameObject* caller = method == nullptr ? nullptr : PyFrame_GetBack(method);
    if (caller != nullptr) {
      refund_frame(caller);
      Py_DECREF(caller);
    }
  }
  exclusion_enter(false);
}
void fakecuda_exclusion_exit() { exclusion_exit(); }
// Python's handles on exclusion_suspend / exclusion_resume (shim.script_time).
int fakecuda_exclusion_suspend() { return exclusion_suspend(); }
void fakecuda_exclusion_resume(int depth) { exclusion_resume(depth); }
// The rest of the innermost op dispatch on the calling thread is the script's CPU time: the fake
// mode deferred the op to a tensor subclass (DTensor), whose dispatch a real host runs too. The
// ops that dispatch issues come back through ExcludingInterpreter::dispatch, excluded again.
void fakecuda_count_rest_of_dispatch() {
  int frame = t_dispatch_frames - 1;
  if (frame < 0 || frame >= kMaxDispatchFrames || t_dispatch_suspended[frame] >= 0) return;
  t_dispatch_suspended[frame] = exclusion_suspend();
}
// Count the calling thread's Python work from now on (needs the GIL: call through a PyDLL).
// It replaces the thread's trace function (sys.settrace); returns 0, or -1 if one was set.
int fakecuda_count_thread() {
  PyThreadState* state = PyThreadState_Get();
  int had_trace = state->c_tracefunc != nullptr && state->c_tracefunc != count_work ? -1 : 0;
  PyEval_SetTrace(count_work, nullptr);
  return had_trace;
}
// Whether the calling thread's trace function is still the counter (needs the GIL).
int fakecuda_thread_counted() { return PyThreadState_Get()->c_tracefunc == count_work; }
// Python work counted so far, all threads: out[0] lines, out[1] calls outside hot walks, out[2]
// lines, out[3] calls inside them.
void fakecuda_work_counts(int64_t* out) {
  out[0] = g_work_lines.load(std::memory_order_relaxed);
  out[1] = g_work_calls.load(std::memory_order_relaxed);
  out[2] = g_hot_lines.load(std::memory_order_relaxed);
  out[3] = g_hot_calls.load(std::memory_order_relaxed);
}
// The hot walks' code objects (a tuple of them; needs the GIL), replacing any set before. The
// caller keeps them alive.
int fakecuda_set_hot_code(PyObject* codes) {
  if (!PyTuple_Check(codes)) return -1;
  std::vector<const PyObject*> hot;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(codes); ++i) {
    PyObject* code = PyTuple_GET_ITEM(codes, i);
    if (!PyCode_Check(code)) return -1;
    hot.push_back(code);
  }
  g_hot_code = std::move(hot);
  return 0;
}
// Excluded CPU time of all threads so far, open sections up to now included.
int64_t fakecuda_excluded_ns() {
  int64_t open_ns = 0;
  pthread_mutex_lock(&g_threads_mutex);
  for (const ThreadExclusion* t : g_threads) {
    int64_t entry_ns = t->entry_ns.load();
    if (entry_ns != kClosed) open_ns += thread_cpu_ns(t->clock) - entry_ns;
  }
  pthread_mutex_unlock(&g_threads_mutex);
  return g_closed_ns.load() + open_ns;
}
// The calling thread's CPU time that counts as the script's: its CPU time minus its excluded
// sections (an open one up to now) and deductions.
int64_t fakecuda_thread_counted_ns() {
  ThreadExclusion& t = this_thread_exclusion();
  int64_t now_ns = thread_cpu_ns(t.clock);
  int64_t open_ns = t.depth > 0 ? now_ns - t.entry_ns.load() : 0;
  return now_ns - t.excluded_ns - open_ns;
}
void fakecuda_set_deductions(int64_t section_ns, int64_t dispatch_ns) {
  g_section_deduction_ns = section_ns;
  g_dispatch_deduction_ns = dispatch_ns;
}
void fakecuda_deductions(int64_t* out) {
  out[0] = g_section_deduction_ns.load();
  out[1] = g_dispatch_deduction_ns.load();
}
// Enter and leave `n` empty sections on the calling thread; returns the CPU time of it that
// counts as the script's (to measure the section deduction, set to 0 first).
int64_t fakecuda_count_empty_sections(int n) {
  int64_t before_ns = fakecuda_thread_counted_ns();
  for (int i = 0; i < n; ++i) {
    exclusion_enter(false);
    exclusion_exit();
  }
  return fakecuda_thread_counted_ns() - before_ns;
}
}

