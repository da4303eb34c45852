// The fallback ban on every thread of the candidate's runner (cuda_gym/judge/thread_ban.py).
//
// The runner's dispatch mode refuses PyTorch ops on forward's own thread. A thread the
// solution starts (std::thread, a pool made at import) is outside that mode: from it an
// extension could have PyTorch do the task (a transpose task's `.contiguous()`). Here a global
// RecordFunction callback sees every op the dispatcher runs, on any thread, and records each
// op outside the allowed set (or a copy that changes the dtype) called from a thread other than
// the one that installed it (the runner's, whose ops in forward its dispatch mode judges).
// Outside forward and its own steps the runner has that thread watched too (`watch_serving`):
// there only code of the solution's could call an op (a finalizer, a storage's deleter).
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

struct State {
  std::unordered_set<std::string> allowed;
  // Ops made only of others (CompositeImplicitAutograd: `to`, `reshape`, `matmul`): the
  // dispatcher records their parts too, and those are what is judged, as the mode judges them.
  std::unordered_set<std::string> composite;
  std::thread::id serving;
  bool nested_ok = false;  // vendor tasks: ops of other threads while the serving one is in an op
  std::atomic<int> serving_depth{0};
  std::atomic<bool> watch_serving{false};  // the serving thread judged as the others are
  // The runner's own copy of an output into the driver's slot, allowed once while watched.
  std::atomic<uintptr_t> allowed_copy{0};
  std::atomic<long> count{0};
  std::mutex mutex;
  std::vector<std::string> found;
};

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

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  State* s = state;
  if (s == nullptr) return nullptr;
  const bool serving = std::this_thread::get_id() == s->serving;
  if (serving) {
    if (s->nested_ok) s->serving_depth.fetch_add(1, std::memory_order_relaxed);
    if (!s->watch_serving.load(std::memory_order_relaxed)) return nullptr;
  }
  const char* raw = fn.name();
  if (raw == nullptr) return nullptr;
  std::string name(raw);
  if (s->composite.count(name)) return nullptr;
  if (serving && name == "aten::copy_" && runner_copy(s, fn.inputs())) return nullptr;
  if (s->allowed.count(name) && !converts_dtype(name, fn.inputs())) return nullptr;
  if (!serving && s->nested_ok && s->serving_depth.load(std::memory_order_relaxed) > 0)
    return nullptr;
  s->count.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->found.size() < kMaxFound) s->found.push_back(name);
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  State* s = state;
  if (s != nullptr && s->nested_ok && std::this_thread::get_id() == s->serving)
    s->serving_depth.fetch_sub(1, std::memory_order_relaxed);
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

}  // namespace

extern "C" {

// Install the ban (once): `allowed` holds the allowed op names, one per line. The calling
// thread is the serving one. 0 on success.
int cuda_gym_thread_ban_install(const char* allowed, int nested_ok) {
  if (state != nullptr || allowed == nullptr) return 1;
  auto* s = new State();
  const char* p = allowed;
  while (*p) {
    const char* end = std::strchr(p, '\n');
    size_t n = end ? static_cast<size_t>(end - p) : std::strlen(p);
    if (n) s->allowed.emplace(p, n);
    p += n + (end ? 1 : 0);
  }
  s->composite = composite_ops();
  s->serving = std::this_thread::get_id();
  s->nested_ok = nested_ok != 0;
  state = s;
  at::addGlobalCallback(at::RecordFunctionCallback(on_start, s->nested_ok ? on_end : nullptr)
                            .needsInputs(true)
                            .scopes({at::RecordScope::FUNCTION}));
  return 0;
}

// Judge the serving thread's ops too (on != 0) or leave them to the runner's mode (0).
void cuda_gym_thread_ban_watch_serving(int on) {
  State* s = state;
  if (s != nullptr) s->watch_serving.store(on != 0, std::memory_order_relaxed);
}

// Allow the serving thread one `aten::copy_` into the tensor whose data starts at `dst` (the
// runner's copy of an output into the driver's slot), while it is watched.
void cuda_gym_thread_ban_allow_copy(void* dst) {
  State* s = state;
  if (s != nullptr) s->allowed_copy.store(reinterpret_cast<uintptr_t>(dst));
}

// The ops recorded since the last take, one per line, into `out` (NUL-terminated, at most
// `size` bytes); returns how many were refused in all since the last take, or -1 when no
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
