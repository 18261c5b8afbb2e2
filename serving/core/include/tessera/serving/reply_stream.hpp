// tessera/serving/reply_stream.hpp: the body of a streamed HTTP answer (server-sent events):
// the producer (an LLM request's engine events) writes chunks from any thread and closes it; the
// HTTP server sends each chunk as it comes (chunked transfer encoding) and, when the client goes
// away or a write fails, cancels it, which calls the producer's cancel hook once.
//
//   auto s = std::make_shared<reply_stream>();
//   s->on_cancel([engine, id] { engine->cancel(id); });
//   reply({200, "text/event-stream", "", ..., .stream = s});   // headers go out now
//   s->write("data: {...}\n\n");
//   s->close();                                                // the last chunk
#pragma once

#include <functional>
#include <mutex>
#include <string>

namespace tessera::serving {

class reply_stream {
 public:
  /// Producer: appends a chunk (ignored after close or cancel).
  void write(std::string chunk) {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      if (closed_ || cancelled_ || chunk.empty()) return;
      pending_ += chunk;
      wake = wake_;
    }
    if (wake) wake();
  }
  /// Producer: no more chunks.
  void close() {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      wake = wake_;
    }
    if (wake) wake();
  }
  /// Producer: what to do when the client is gone (called at most once, maybe at once).
  void on_cancel(std::function<void()> f) {
    bool now = false;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) now = true;
      else cancel_ = std::move(f);
    }
    if (now && f) f();
  }
  /// Server: the client is gone or cannot be written to.
  void cancel() {
    std::function<void()> f;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      f = std::move(cancel_);
      wake_ = nullptr;
    }
    if (f) f();
  }
  /// Server: called (any thread) whenever a chunk or the close arrives; empty to detach.
  void set_wake(std::function<void()> wake) {
    std::lock_guard lock(mu_);
    wake_ = std::move(wake);
  }
  /// Server: everything written so far; `closed` when nothing more will come after it.
  std::string take(bool& closed) {
    std::lock_guard lock(mu_);
    closed = closed_;
    std::string out;
    out.swap(pending_);
    return out;
  }
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

 private:
  mutable std::mutex mu_;
  std::string pending_;
  bool closed_ = false;
  bool cancelled_ = false;
  std::function<void()> wake_;
  std::function<void()> cancel_;
};

}  // namespace tessera::serving
