// tessera/serving/journal.hpp: what a host accepted and answered, kept in a file so that a host
// restarted after a crash can tell its clients what happened to the requests the previous
// process had accepted (GET /info -> "previous_instance", and a warning at start-up).
//
// One line per event, flushed as it is written (a killed process loses nothing the kernel has):
//   S <pid> <unix seconds>      a host process started
//   A <id>                      a request was accepted
//   D <id> <http status>        it was answered
//
//   auto j = request_journal::open("/var/tmp/tessera.journal");   // reads the previous run
//   uint64_t id = (*j)->accepted();  ...  (*j)->answered(id, 200);
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/common/status.hpp"

namespace tessera::serving {

struct previous_instance {
  bool present = false;        ///< the journal held an earlier host process
  int64_t pid = 0;
  int64_t started_unix = 0;
  uint64_t accepted = 0;
  uint64_t answered = 0;
  uint64_t unanswered() const { return accepted - answered; }
  /// A sentence for clients and logs.
  std::string describe() const;
};

class request_journal {
 public:
  /// Reads what an earlier process left in `path`, then starts a fresh journal there.
  static result<std::unique_ptr<request_journal>> open(const std::string& path);
  ~request_journal();

  uint64_t accepted();
  void answered(uint64_t id, unsigned http_status);
  const previous_instance& previous() const { return previous_; }

 private:
  request_journal() = default;
  std::mutex mu_;
  std::FILE* file_ = nullptr;
  uint64_t next_ = 1;
  previous_instance previous_;
};

}  // namespace tessera::serving
