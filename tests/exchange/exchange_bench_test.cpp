// tessera-bench-exchange from the user's side, at sizes that take seconds: goodput rows for raw
// ZeroMQ, tessera receiving in place and tessera copying, each having taken the path it names
// (the CSV's in-place shares); the in-process receive path; a bad option refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/test/child_process.hpp"

using namespace tessera::test_support;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string f; std::getline(in, f, sep);) out.push_back(f);
  return out;
}

}  // namespace

TEST(ExchangeBench, GoodputRowsForInPlaceAndCopyReceive) {
  const fs::path csv = fs::temp_directory_path() / ("tessera-xbench-" + std::to_string(getpid()) + ".csv");
  auto r = run_to_end({bin("tessera-bench-exchange"), "--part", "exchange", "--quick", "--sizes", "4K,1M", "--csv",
                       csv.string()},
                      240);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream f(csv);
  std::string header;
  ASSERT_TRUE(std::getline(f, header));
  const auto names = split(header, ',');
  auto column = [&](const std::string& n) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == n) return i;
    ADD_FAILURE() << "no column " << n << " in " << header;
    return size_t{0};
  };
  const size_t param = column("param"), raw = column("baseline"), tessera = column("tessera"),
               copy_receive = column("tessera_copy_receive"), share = column("tessera_in_place_share"),
               copy_share = column("copy_receive_in_place_share");
  int rows = 0;
  for (std::string line; std::getline(f, line);) {
    const auto v = split(line, ',');
    ASSERT_EQ(v.size(), names.size()) << line;
    SCOPED_TRACE(line);
    EXPECT_GT(std::stod(v[raw]), 0);
    EXPECT_GT(std::stod(v[tessera]), 0);
    EXPECT_GT(std::stod(v[copy_receive]), 0);
    ASSERT_TRUE(v[param] == "4 KiB" || v[param] == "1 MiB");
    // Row (b) keeps every 1 MiB slice in place (4 KiB is below run_limits::in_place_min_bytes); the
    // copy-receive diagnostic keeps none.
    EXPECT_EQ(std::stod(v[share]), v[param] == "1 MiB" ? 1.0 : 0.0);
    EXPECT_EQ(std::stod(v[copy_share]), 0.0);
    ++rows;
  }
  EXPECT_EQ(rows, 2);
  EXPECT_NE(r.out.find("copy receive"), std::string::npos) << r.out;
  fs::remove(csv);
}

TEST(ExchangeBench, ReceivePathInProcess) {
  auto r = run_to_end({bin("tessera-bench-exchange"), "--part", "receive", "--quick", "--sizes", "64K,1M"}, 240);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("| 64 KiB | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1 MiB | "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| test | size / tiles"), std::string::npos) << "an empty goodput table\n" << r.out;
}

TEST(ExchangeBench, RefusesAnUnknownPart) {
  auto r = run_to_end({bin("tessera-bench-exchange"), "--part", "everything"}, 60);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--part must be"), std::string::npos) << r.err;
}
