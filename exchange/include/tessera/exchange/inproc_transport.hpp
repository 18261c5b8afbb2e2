// tessera/exchange/inproc_transport.hpp: mailboxes in one process, for unit tests only.
//
//   inproc_fabric fabric(4);
//   auto t0 = fabric.endpoint(0);   // a transport for tile 0
//   t0->send(2, std::move(e));      // lands in tile 2's mailbox
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>

#include "tessera/exchange/transport.hpp"

namespace tessera::exchange {

class inproc_fabric {
 public:
  explicit inproc_fabric(uint32_t tiles);
  /// A transport for `tile`; the fabric must outlive it.
  std::unique_ptr<transport> endpoint(uint32_t tile);
  /// Wakes every receiver and fails further sends.
  void close();

 private:
  friend class inproc_transport;
  struct mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<envelope> queue;
  };
  std::vector<std::unique_ptr<mailbox>> boxes_;
  std::atomic<bool> closed_{false};
};

}  // namespace tessera::exchange
