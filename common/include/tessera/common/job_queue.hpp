// tessera/common/job_queue.hpp: a closable FIFO of jobs between the threads that submit and the
// worker threads that run them. close() hands back what was still queued (the owner answers it,
// say with `cancelled`); workers' pop() returns nothing once the queue is closed and empty, so a
// job a worker holds finishes and the worker then ends.
//
//   job_queue<job> q;
//   if (!q.push(j)) j.done(cancelled);              // closed: j is left as it was
//   while (auto j = q.pop()) run(*j);               // a worker
//   for (auto& j : q.close()) j.done(cancelled);    // stop(): then join the workers
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace tessera {

template <class Job>
class job_queue {
 public:
  /// Queues `j` (moved from) and wakes a worker; false once closed (then `j` is untouched).
  bool push(Job& j) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      jobs_.push_back(std::move(j));
    }
    cv_.notify_one();
    return true;
  }
  /// The oldest job; waits for one. Empty once the queue is closed.
  std::optional<Job> pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
    if (jobs_.empty()) return std::nullopt;
    std::optional<Job> j(std::move(jobs_.front()));
    jobs_.pop_front();
    return j;
  }
  /// Refuses further pushes, wakes every worker, and returns the jobs not yet taken (oldest
  /// first). Closing again returns nothing.
  std::deque<Job> close() {
    std::deque<Job> left;
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      left.swap(jobs_);
    }
    cv_.notify_all();
    return left;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool closed_ = false;
};

}  // namespace tessera
