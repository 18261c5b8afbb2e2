// common/job_queue.hpp: FIFO order across threads, close() hands back what no worker took and
// wakes every waiting worker, a push after close is refused and leaves the job to its owner.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tessera/common/job_queue.hpp"

using tessera::job_queue;

TEST(JobQueue, WorkersTakeJobsInOrderAndEndWhenClosed) {
  job_queue<int> q;
  std::vector<int> seen;
  std::atomic<int> taken{0};
  std::thread worker([&] {
    while (auto j = q.pop()) {
      seen.push_back(*j);
      taken.fetch_add(1);
    }
  });
  for (int i = 0; i < 1000; ++i) {
    int j = i;
    ASSERT_TRUE(q.push(j));
  }
  // Once the worker took everything, close() has nothing left over and ends the worker.
  for (int i = 0; i < 10000 && taken.load() < 1000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(q.close().empty());
  worker.join();
  ASSERT_EQ(seen.size(), 1000u) << "close() must not drop a job a worker already took";
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[i], i);
}

TEST(JobQueue, CloseReturnsUntakenJobsWakesWaitersAndRefusesPushes) {
  job_queue<std::unique_ptr<int>> q;
  std::atomic<int> ended{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i)
    waiters.emplace_back([&] {
      // Every waiter blocks (nothing queued yet) until close() wakes it.
      while (q.pop()) {
      }
      ended.fetch_add(1);
    });
  auto left = q.close();
  for (auto& w : waiters) w.join();
  EXPECT_EQ(ended.load(), 3);
  EXPECT_TRUE(left.empty());
  auto job = std::make_unique<int>(7);
  EXPECT_FALSE(q.push(job));
  ASSERT_NE(job, nullptr) << "a refused job stays with its owner";
  EXPECT_EQ(*job, 7);
  EXPECT_FALSE(q.pop().has_value());
}

TEST(JobQueue, CloseHandsBackWhatNoWorkerTookOldestFirst) {
  job_queue<int> q;
  for (int i = 0; i < 5; ++i) {
    int j = i;
    q.push(j);
  }
  auto left = q.close();
  ASSERT_EQ(left.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(left[i], i);
  EXPECT_TRUE(q.close().empty());
}
