// A backend for unit tests: records batches and answers them when the test says (or at once).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/toys/toy_model.hpp"

namespace tessera::serving::test_support {
using namespace tessera::toys;

class fake_backend : public backends::backend {
 public:
  explicit fake_backend(backends::backend_info info, bool answer_at_once = false)
      : info_(std::move(info)), at_once_(answer_at_once) {}

  backends::backend_info info() const override { return info_; }
  void submit(backends::batch_request request, std::function<void(backends::batch_result)> done) override {
    int64_t tokens = 0;
    for (const auto& s : request.sequences) tokens += static_cast<int64_t>(s.token_ids.size());
    {
      std::lock_guard lock(mu_);
      outstanding_ += tokens;
      pending_.push_back({std::move(request), std::move(done), tokens});
      submitted_.push_back(pending_.back().request);
    }
    if (at_once_) answer_all();
  }
  int64_t outstanding_tokens() const override {
    std::lock_guard lock(mu_);
    return outstanding_ + extra_load;
  }
  bool healthy() const override { return healthy_flag; }

  /// Answers every pending batch: toy logits, or `fail` when not ok.
  void answer_all(status fail = ok_status()) {
    std::vector<job> jobs;
    {
      std::lock_guard lock(mu_);
      jobs.swap(pending_);
    }
    for (auto& j : jobs) {
      backends::batch_result r;
      r.batch_id = j.request.batch_id;
      if (fail.ok()) {
        r.num_labels = info_.num_labels;
        for (const auto& s : j.request.sequences) {
          auto row = toy_logits(s, info_.num_labels);
          r.logits.insert(r.logits.end(), row.begin(), row.end());
        }
      } else {
        r.st = fail;
      }
      {
        std::lock_guard lock(mu_);
        outstanding_ -= j.tokens;
      }
      j.done(std::move(r));
    }
  }
  std::vector<backends::batch_request> submitted() const {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }

  bool healthy_flag = true;
  int64_t extra_load = 0;

 private:
  struct job {
    backends::batch_request request;
    std::function<void(backends::batch_result)> done;
    int64_t tokens;
  };
  backends::backend_info info_;
  bool at_once_;
  mutable std::mutex mu_;
  std::vector<job> pending_;
  std::vector<backends::batch_request> submitted_;
  int64_t outstanding_ = 0;
};

}  // namespace tessera::serving::test_support
