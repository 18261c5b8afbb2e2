// The UTF-8 check of client text: each kind of invalid sequence is found at its byte offset with
// its reason, valid text (NUL, 4-byte characters, noncharacters) passes, and printable() never
// returns invalid bytes.
#include <gtest/gtest.h>

#include "tessera/serving/utf8.hpp"

using namespace tessera::serving;

namespace {

struct bad_case {
  const char* name;
  std::string text;
  size_t offset;
  const char* reason_part;
};

}  // namespace

TEST(Utf8, FindsEachKindOfInvalidSequenceAtItsOffset) {
  const bad_case cases[] = {
      {"stray continuation", std::string("ab\x80"), 2, "leading"},
      {"invalid lead 0xFF", std::string("\xff\xfe text"), 0, "leading"},
      {"five-byte form", std::string("x\xf8\x88\x80\x80\x80"), 1, "leading"},
      {"overlong slash", std::string("a/\xc0\xaf"), 2, "overlong"},
      {"overlong 3-byte", std::string("\xe0\x80\xaf"), 0, "overlong"},
      {"overlong 4-byte", std::string("\xf0\x80\x80\xaf"), 0, "overlong"},
      {"surrogate D800", std::string("ok \xed\xa0\x80"), 3, "surrogate"},
      {"surrogate DFFF", std::string("\xed\xbf\xbf"), 0, "surrogate"},
      {"above U+10FFFF", std::string("\xf4\x90\x80\x80"), 0, "10FFFF"},
      {"truncated at end", std::string("euro \xe2\x82"), 5, "truncated"},
      {"missing continuation", std::string("\xe2\x82 x"), 0, "continuation"},
  };
  for (const auto& c : cases) {
    auto e = find_invalid_utf8(c.text);
    ASSERT_TRUE(e.has_value()) << c.name;
    EXPECT_EQ(e->offset, c.offset) << c.name;
    EXPECT_EQ(e->byte, static_cast<unsigned char>(c.text[c.offset])) << c.name;
    EXPECT_NE(std::string(e->reason).find(c.reason_part), std::string::npos) << c.name << ": " << e->reason;
    std::string msg = e->describe("the body");
    EXPECT_NE(msg.find("at byte " + std::to_string(c.offset)), std::string::npos) << msg;
    EXPECT_FALSE(find_invalid_utf8(msg).has_value()) << c.name << ": the message echoes raw bytes";
  }
}

TEST(Utf8, ValidTextPasses) {
  for (std::string ok : {std::string(""), std::string("plain"), std::string("a\0b", 3),
                         std::string("caf\xc3\xa9"), std::string("\xe2\x82\xac"),
                         std::string("\xf0\x9f\x98\x80"), std::string("\xef\xbf\xbf"),
                         std::string("\xf4\x8f\xbf\xbf")})
    EXPECT_FALSE(find_invalid_utf8(ok).has_value()) << ok;
}

TEST(Utf8, PrintableReplacesInvalidBytesAndCutsOnACharacterBoundary) {
  EXPECT_EQ(printable("abc"), "abc");
  std::string p = printable(std::string("a\xff" "b"));
  EXPECT_FALSE(find_invalid_utf8(p).has_value());
  EXPECT_EQ(p, "a\xef\xbf\xbd" "b");
  // 99 ASCII bytes then a 3-byte euro sign: a cut at 100 bytes falls inside it.
  std::string s = std::string(99, 'x') + "\xe2\x82\xac" + "tail";
  std::string cut = printable(s, 100);
  EXPECT_EQ(cut, std::string(99, 'x') + "...");
  EXPECT_FALSE(find_invalid_utf8(cut).has_value());
}
