#include "tessera/exchange/inproc_transport.hpp"

namespace tessera::exchange {

class inproc_transport final : public transport {
 public:
  inproc_transport(inproc_fabric& f, uint32_t self) : f_(f), self_(self) {}
  uint32_t self() const override { return self_; }

  status send(uint32_t peer, envelope&& e) override {
    if (f_.closed_) return status{errc::cancelled, "fabric closed"};
    if (peer >= f_.boxes_.size()) return status::invalid("no tile " + std::to_string(peer) + " in the fabric");
    sent_ += e.payload_bytes();
    auto& box = *f_.boxes_[peer];
    {
      std::lock_guard lk(box.mu);
      box.queue.push_back(std::move(e));
    }
    box.cv.notify_one();
    return ok_status();
  }

  result<bool> recv(envelope& out, std::chrono::milliseconds timeout) override {
    auto& box = *f_.boxes_[self_];
    std::unique_lock lk(box.mu);
    if (!box.cv.wait_for(lk, timeout, [&] { return !box.queue.empty() || f_.closed_; })) return false;
    if (box.queue.empty()) return status{errc::cancelled, "fabric closed"};
    out = std::move(box.queue.front());
    box.queue.pop_front();
    received_ += out.payload_bytes();
    return true;
  }

  uint64_t bytes_sent() const override { return sent_; }
  uint64_t bytes_received() const override { return received_; }

 private:
  inproc_fabric& f_;
  uint32_t self_;
  uint64_t sent_ = 0, received_ = 0;
};

inproc_fabric::inproc_fabric(uint32_t tiles) {
  for (uint32_t i = 0; i < tiles; ++i) boxes_.push_back(std::make_unique<mailbox>());
}

std::unique_ptr<transport> inproc_fabric::endpoint(uint32_t tile) {
  return std::make_unique<inproc_transport>(*this, tile);
}

void inproc_fabric::close() {
  closed_ = true;
  for (auto& b : boxes_) {
    std::lock_guard lk(b->mu);
    b->cv.notify_all();
  }
}

}  // namespace tessera::exchange
