// tessera/test/refusals.hpp: a tool refusing bad command lines, as its user sees it: exit 2, the
// message on stderr names what is wrong, and no result table is printed.
//
//   expect_refusals(bin("tessera-bench-placement"), {{{"--dtype", "fp16"}, "--dtype fp16"}});
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/test/child_process.hpp"

namespace tessera::test_support {

struct refusal {
  std::vector<std::string> args;  ///< after the binary
  std::string says;               ///< must appear in stderr
};

inline void expect_refusals(const std::string& binary, const std::vector<refusal>& cases, int timeout_s = 120) {
  for (const auto& c : cases) {
    std::vector<std::string> args{binary};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = run_to_end(args, timeout_s);
    EXPECT_EQ(r.rc, 2) << c.says << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("| "), std::string::npos) << "no table for a refused run: " << r.out;
  }
}

}  // namespace tessera::test_support
