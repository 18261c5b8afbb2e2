// What both HTTP load drivers (http_driver.cpp, openai_driver.cpp) share: Beast and its names, and
// the open-loop arrival clock (plan entry i is sent at `start + seconds(i)`, whatever the answers
// are doing). Private to tessera_loadgen.
#pragma once

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp needs std::exchange
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>

namespace tessera::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

}  // namespace tessera::loadgen

namespace tessera::loadgen::detail {

/// Fires every entry from `next` on whose time has come (`fire(i, due)`), then waits on `timer`
/// for the next one and goes on from there (`next` must outlive the wait: a driver's member).
/// `end()` runs once no entry is left or `stopped()`; a cancelled wait ends nothing.
template <class Seconds, class Fire, class Stopped, class End>
void fire_due_arrivals(boost::asio::steady_timer& timer, std::chrono::steady_clock::time_point start, size_t& next,
                       size_t n, Seconds seconds, Fire fire, Stopped stopped, End end) {
  using steady = std::chrono::steady_clock;
  const auto now = steady::now();
  while (next < n && !stopped()) {
    const auto due = start + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(seconds(next)));
    if (due > now) {
      timer.expires_at(due);
      timer.async_wait([&timer, start, &next, n, seconds, fire, stopped, end](const boost::system::error_code& ec) {
        if (!ec) fire_due_arrivals(timer, start, next, n, seconds, fire, stopped, end);
      });
      return;
    }
    fire(next++, due);
  }
  end();
}

}  // namespace tessera::loadgen::detail
