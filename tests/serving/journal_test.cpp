#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/serving/journal.hpp"

using namespace tessera::serving;

TEST(Journal, ReportsWhatThePreviousProcessLeftUnanswered) {
  auto path = std::filesystem::temp_directory_path() / ("tessera-journal-unit-" + std::to_string(::getpid()));
  {
    auto first = request_journal::open(path.string());
    ASSERT_TRUE(first);
    EXPECT_FALSE((*first)->previous().present);
    auto a = (*first)->accepted(), b = (*first)->accepted(), c = (*first)->accepted();
    (*first)->answered(b, 200);
    (*first)->answered(a, 422);
    (void)c;  // the process "dies" before answering c
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "A";  // a torn last line is ignored
  }
  auto second = request_journal::open(path.string());
  ASSERT_TRUE(second);
  const auto& p = (*second)->previous();
  EXPECT_TRUE(p.present);
  EXPECT_EQ(p.accepted, 3u);
  EXPECT_EQ(p.answered, 2u);
  EXPECT_EQ(p.unanswered(), 1u);
  EXPECT_NE(p.describe().find("1 were lost"), std::string::npos) << p.describe();
  // The second process starts a fresh journal: a third sees only the second's (empty) run.
  second->reset();
  auto third = request_journal::open(path.string());
  ASSERT_TRUE(third);
  EXPECT_EQ((*third)->previous().accepted, 0u);
  std::filesystem::remove(path);
  EXPECT_FALSE(request_journal::open("/nonexistent-dir/x/journal"));
}
