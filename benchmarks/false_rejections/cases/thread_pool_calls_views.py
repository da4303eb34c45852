"""Linear layer, bias and ReLU on a thread pool made at import, whose workers call ATen's views.

Each worker takes a band of rows as `x.narrow(0, r0, n).contiguous()` (a view of a contiguous
input: no copy) and a scratch row from `torch::empty`, then computes the band with its own loop.
Allowed ops called on threads other than forward's are still allowed (the thread ban).

Task: tasks/linear_relu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace {

class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
    for (auto& w : workers_) w.detach();
  }
  int size() const { return static_cast<int>(workers_.size()); }
  void run(std::function<void(int)> job) {
    std::unique_lock<std::mutex> lock(m_);
    job_ = std::move(job);
    left_ = size();
    ++round_;
    cv_.notify_all();
    done_.wait(lock, [this] { return left_ == 0; });
  }

 private:
  void loop(int i) {
    long seen = 0;
    for (;;) {
      std::function<void(int)> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return round_ != seen; });
        seen = round_;
        job = job_;
      }
      job(i);
      std::lock_guard<std::mutex> lock(m_);
      if (--left_ == 0) done_.notify_all();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  std::function<void(int)> job_;
  long round_ = 0;
  int left_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool(std::max(2u, std::thread::hardware_concurrency()));
  return *p;
}

}  // namespace

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous());
  const int64_t rows = x.size(0), in = x.size(1), outs = w.size(0);
  auto out = torch::empty({rows, outs}, x.options());
  const int n = pool().size();
  const int64_t band = (rows + n - 1) / n;
  pool().run([&](int i) {
    const int64_t r0 = std::min(rows, i * band), r1 = std::min(rows, r0 + band);
    if (r0 >= r1) return;
    torch::Tensor xs = x.narrow(0, r0, r1 - r0).contiguous();
    torch::Tensor acc = torch::empty({outs}, x.options());
    const float *xp = xs.data_ptr<float>(), *wp = w.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* ap = acc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < r1 - r0; ++r) {
      for (int64_t o = 0; o < outs; ++o) {
        float s = bp[o];
        for (int64_t k = 0; k < in; ++k) s += xp[r * in + k] * wp[o * in + k];
        ap[o] = s > 0.0f ? s : 0.0f;
      }
      std::copy(ap, ap + outs, op + (r0 + r) * outs);
    }
  });
  return out;
}
"""

ext = load_inline(
    name="frc_thread_pool_calls_views",
    cpp_sources=CPP_SOURCE,
    functions=["linear_relu"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return ext.linear_relu(x, self.linear.weight, self.linear.bias)
