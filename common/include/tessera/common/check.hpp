// tessera/common/check.hpp: invariants whose failure is a bug in tessera (gem5's `panic`).
//
//   TESSERA_CHECK(offset + n <= size) << "slice " << id << " overruns its tensor";
//
// On failure it prints file:line, the condition and the streamed context to stderr and aborts.
// Never use it for user input or for anything a peer sends: those are statuses.
#pragma once

#include <sstream>

namespace tessera::detail {

class check_failure {
 public:
  check_failure(const char* file, int line, const char* cond);
  [[noreturn]] ~check_failure();
  template <class T>
  check_failure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace tessera::detail

#define TESSERA_CHECK(cond) \
  if (cond) {               \
  } else                    \
    ::tessera::detail::check_failure(__FILE__, __LINE__, #cond)
