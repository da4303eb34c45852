// The fallback ban on every thread of the candidate's runner (cuda_gym/judge/thread_ban.py).
//
// The runner's dispatch mode refuses PyTorch ops on forward's own thread. A thread the
// solution starts (std::thread, a pool made at import) is outside that mode: from it an
// extension could have PyTorch do the task (a transpose task's `.contiguous()`). Here a global
// RecordFunction callback sees every op the dispatcher runs, on any thread, and records each
// op outside the allowed set (or a copy that changes the dtype) called from a thread other than
// the one that installed it (the runner's).
// The runner's own thread is watched at one of three levels (`watch_serving`):
// - all: outside forward and its own steps, where only code of the solution's could call an op
//   (a finalizer, a storage's deleter);
// - nested (inside forward): the mode judges forward's own calls, and pops itself to run an
//   allowed one; what that op's kernel calls in turn is judged here. An allowed op made to run
//   other code (a kernel registered for it, a subclass, the Python dispatcher: red-team rounds
//   18 and 19) gets no further than the op it called;
// - off: the runner's own steps.
// On a vendor task the parts of an allowed GEMM or convolution (`opaque`: bias adds, OpenMP's
// threads) pass while the runner's thread is inside it.
//
// An exception from a callback would be swallowed by RecordFunction: the op is recorded, not
// stopped, and the runner reports it as a violation (which can only make a verdict worse).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace {

constexpr size_t kMaxFound = 20;

enum Watch : int { kOff = 0, kAll = 1, kNested = 2 };

struct State {
  std::unordered_set<std::string> allowed;
  // Ops made only of others (CompositeImplicitAutograd: `to`, `reshape`, `matmul`): the
  // dispatcher records their parts too, and those are what is judged, as the mode judges them.
  std::unordered_set<std::string> composite;
  // Allowed ops whose insides are PyTorch's own business (a vendor task's GEMMs).
  std::unordered_set<std::string> opaque;
  std::thread::id serving;
  std::atomic<int> watch{kOff};  // how the serving thread is judged (Watch)
  std::atomic<bool> in_opaque{false};  // the serving thread is inside an opaque op
  // The runner's own copy of an output into the driver's slot, allowed once while watched.
  std::atomic<uintptr_t> allowed_copy{0};
  std::atomic<long> count{0};
  std::mutex mutex;
  std::vector<std::string> found;
};

// The serving thread's ops entered and not yet left, and the depth of the opaque one it is
// inside (0: none). Only that thread reads or writes them.
thread_local int serving_depth = 0;
thread_local int opaque_at = 0;

State* state = nullptr;

c10::ScalarType dtype_of(const c10::IValue& value, bool* ok) {
  *ok = value.isTensor();
  return *ok ? value.toTensor().scalar_type() : c10::ScalarType::Undefined;
}

// A copy whose result has another dtype than its source (runner._converts_dtype's rule).
bool converts_dtype(const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  bool a_ok = false, b_ok = false;
  if (name == "aten::copy_" || name == "aten::_copy_from" ||
      name == "aten::_copy_from_and_resize") {
    if (in.size() < 2) return false;
    auto a = dtype_of(in[0], &a_ok), b = dtype_of(in[1], &b_ok);
    return a_ok && b_ok && a != b;
  }
  if (name == "aten::_to_copy") {
    if (in.size() < 2 || in[1].isNone() || !in[1].isInt()) return false;
    auto source = dtype_of(in[0], &a_ok);
    return a_ok && static_cast<c10::ScalarType>(in[1].toInt()) != source;
  }
  return false;
}

// The runner's copy into the slot it announced (cuda_gym_thread_ban_allow_copy): taken once.
bool runner_copy(State* s, c10::ArrayRef<const c10::IValue> in) {
  uintptr_t wanted = s->allowed_copy.load();
  if (wanted == 0 || in.empty() || !in[0].isTensor()) return false;
  const auto& dst = in[0].toTensor();
  if (!dst.has_storage() || reinterpret_cast<uintptr_t>(dst.data_ptr()) != wanted) return false;
  return s->allowed_copy.compare_exchange_strong(wanted, 0);
}

// `inside`: an op the serving thread ran inside another (recorded as ">name").
void record(State* s, const std::string& name, bool inside) {
  s->count.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->found.size() < kMaxFound) s->found.push_back(inside ? ">" + name : name);
}

// Events that are not ops (no namespace: "PythonDispatchMode" around a mode's
// __torch_dispatch__, "PythonSubclass" around a subclass's) count for depth only.
bool refused(State* s, const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  if (name.find("::") == std::string::npos || s->composite.count(name)) return false;
  return !s->allowed.count(name) || converts_dtype(name, in);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  State* s = state;
  if (s == nullptr) return nullptr;
  const char* raw = fn.name();
  if (std::this_thread::get_id() != s->serving) {
    if (raw == nullptr || s->in_opaque.load(std::memory_order_relaxed)) return nullptr;
    std::string name(raw);
    if (refused(s, name, fn.inputs())) record(s, name, false);
    return nullptr;
  }
  const int depth = ++serving_depth;
  if (raw == nullptr || opaque_at != 0) return nullptr;
  std::string name(raw);
  if (s->opaque.count(name)) {
    opaque_at = depth;
    s->in_opaque.store(true, std::memory_order_relaxed);
  }
  const int watch = s->watch.load(std::memory_order_relaxed);
  if (watch == kOff || (watch == kNested && depth < 2)) return nullptr;
  if (watch == kAll && name == "aten::copy_" && runner_copy(s, fn.inputs())) return nullptr;
  if (refused(s, name, fn.inputs())) record(s, name, watch == kNested);
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  State* s = state;
  if (s == nullptr || std::this_thread::get_id() != s->serving) return;
  if (serving_depth == opaque_at) {
    opaque_at = 0;
    s->in_opaque.store(false, std::memory_order_relaxed);
  }
  if (serving_depth > 0) --serving_depth;
}

// The names whose every overload has a CompositeImplicitAutograd kernel and no kernel of its own
// for a backend.
std::unordered_set<std::string> composite_ops() {
  using c10::DispatchKey;
  const auto own = c10::DispatchKeySet({DispatchKey::CPU, DispatchKey::CUDA,
                                        DispatchKey::CompositeExplicitAutograd,
                                        DispatchKey::CompositeExplicitAutogradNonFunctional});
  std::unordered_set<std::string> yes, no;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& op_name : dispatcher.getAllOpNames()) {
    auto handle = dispatcher.findOp(op_name);
    bool implicit = handle && handle->hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
                    !handle->hasKernelForAnyDispatchKey(own);
    (implicit ? yes : no).insert(op_name.name);
  }
  for (const auto& name : no) yes.erase(name);
  return yes;
}

std::unordered_set<std::string> lines(const char* text) {
  std::unordered_set<std::string> out;
  for (const char* p = text; p != nullptr && *p;) {
    const char* end = std::strchr(p, '\n');
    size_t n = end ? static_cast<size_t>(end - p) : std::strlen(p);
    if (n) out.emplace(p, n);
    p += n + (end ? 1 : 0);
  }
  return out;
}

}  // namespace

extern "C" {

// Install the ban (once): `allowed` holds the allowed op names, one per line, and `opaque`
// those of them whose insides are not judged (may be empty). The calling thread is the
// serving one, left to the runner until `watch_serving`. 0 on success.
int cuda_gym_thread_ban_install(const char* allowed, const char* opaque) {
  if (state != nullptr || allowed == nullptr) return 1;
  auto* s = new State();
  s->allowed = lines(allowed);
  s->opaque = lines(opaque);
  s->composite = composite_ops();
  s->serving = std::this_thread::get_id();
  state = s;
  at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                            .needsInputs(true)
                            .scopes({at::RecordScope::FUNCTION}));
  return 0;
}

// How the serving thread is judged from now on: 0 not at all (the runner's own steps), 1 every
// op, 2 the ops called inside another op (forward, whose own calls the mode judges).
void cuda_gym_thread_ban_watch_serving(int level) {
  State* s = state;
  if (s != nullptr && level >= kOff && level <= kNested) s->watch.store(level);
}

// Allow the serving thread one `aten::copy_` into the tensor whose data starts at `dst` (the
// runner's copy of an output into the driver's slot), while it is watched.
void cuda_gym_thread_ban_allow_copy(void* dst) {
  State* s = state;
  if (s != nullptr) s->allowed_copy.store(reinterpret_cast<uintptr_t>(dst));
}

// The ops recorded since the last take, one per line (">name": inside another op on the
// serving thread), into `out` (NUL-terminated, at most `size` bytes); returns how many were refused in all since the last take, or -1 when no
// global callback is left (this one removed).
long cuda_gym_thread_ban_take(char* out, long size) {
  State* s = state;
  if (s == nullptr || out == nullptr || size <= 0) return 0;
  if (!at::hasGlobalCallbacks()) return -1;
  std::lock_guard<std::mutex> lock(s->mutex);
  std::string text;
  for (const auto& name : s->found) text += name + "\n";
  s->found.clear();
  size_t n = std::min(text.size(), static_cast<size_t>(size - 1));
  std::memcpy(out, text.data(), n);
  out[n] = 0;
  return s->count.exchange(0);
}

}  // extern "C"
