// LLM request traces (common/llm_trace.hpp): the samples of every format in tests/data/traces
// (written by make_samples.py) read with their golden sums and arrivals (computed by Python's csv
// and datetime, an independent reader), dates as UTC seconds, and malformed traces refused with
// the line named: a hand list of defects, then a seeded mutation loop over the samples (every
// mutated trace either reads into sane rows or is refused naming the line that was mutated).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "tessera/common/llm_trace.hpp"
#include "tessera/common/random.hpp"
#include "tessera/common/text.hpp"

namespace tessera {
namespace {

std::string sample_path(const std::string& name) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src ? src : TESSERA_TEST_SOURCE_DIR) + "/tests/data/traces/" + name;
}

std::string sample(const std::string& name) {
  auto t = read_file(sample_path(name));
  EXPECT_TRUE(t.has_value()) << name;
  return t ? *t : std::string();
}

struct golden {
  const char* file;
  const char* format;
  size_t rows;
  int64_t prompt_tokens, output_tokens, skipped;
};

// python3: csv.DictReader over the file, rows with 0 prompt or output tokens left out.
const golden goldens[] = {
    {"tessera.csv", "tessera", 24, 1459, 308, 0},
    {"azure_2023.csv", "azure", 24, 1849, 312, 0},
    {"azure_2024.csv", "azure", 24, 1464, 323, 0},
    {"burstgpt.csv", "burstgpt", 23, 1564, 261, 1},
};

TEST(LlmTrace, EverySampleReadsWithItsGoldenSums) {
  for (const auto& g : goldens) {
    auto t = read_llm_trace(sample_path(g.file));
    ASSERT_TRUE(t.has_value()) << g.file << ": " << t.error().to_string();
    EXPECT_EQ(t->format, g.format) << g.file;
    EXPECT_TRUE(t->has_output());
    ASSERT_EQ(t->rows.size(), g.rows) << g.file;
    int64_t p = 0, o = 0;
    for (size_t i = 0; i < t->rows.size(); ++i) {
      p += t->rows[i].prompt_tokens;
      o += t->rows[i].output_tokens;
      if (i) EXPECT_LE(t->rows[i - 1].arrival_seconds, t->rows[i].arrival_seconds) << g.file;
    }
    EXPECT_EQ(p, g.prompt_tokens) << g.file;
    EXPECT_EQ(o, g.output_tokens) << g.file;
    EXPECT_EQ(t->skipped, g.skipped) << g.file;
    if (g.skipped) EXPECT_EQ(t->first_skipped_line, 7) << g.file;  // the sample's sixth row
    if (std::string(g.format) != "tessera") EXPECT_EQ(t->rows.front().arrival_seconds, 0) << "public clocks start at 0";
  }
}

TEST(LlmTrace, AzureArrivalsAreRelativeToTheFirstRow) {
  // python3: datetime.fromisoformat(TIMESTAMP[:26]) - the first row's, in seconds.
  auto t = parse_llm_trace(sample("azure_2023.csv"));
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(t->rows[1].arrival_seconds, 0.012007, 1e-6);
  EXPECT_NEAR(t->rows[2].arrival_seconds, 0.178468, 1e-6);
  EXPECT_NEAR(t->rows.back().arrival_seconds, 4.579758, 1e-6);
}

TEST(LlmTrace, UtcTimestampsAgreeWithPythonsDatetime) {
  // Golden: python3 datetime.fromisoformat(...).timestamp(); within 1 us (doubles near 1.7e9 s).
  const std::pair<const char*, double> cases[] = {
      {"2023-11-16 18:15:46.3905430", 1700158546.390543}, {"2024-05-10 00:00:00.033970+00:00", 1715299200.03397},
      {"2024-02-29 12:00:00-05:30", 1709227800.0},         {"1970-01-01 00:00:00Z", 0.0},
      {"2024-05-10T00:00:00", 1715299200.0},
  };
  for (const auto& [text, want] : cases) {
    double got = -1;
    ASSERT_TRUE(parse_utc_timestamp(text, got)) << text;
    EXPECT_NEAR(got, want, 1e-6) << text;
  }
  for (const char* bad : {"2023-02-30 00:00:00", "2023-11-16", "2023-11-16 24:00:00", "2023-11-16 18:15:46.",
                          "2023-11-16 18:15:46+5", "2023-11-16 18:15:46 UTC", "23-11-16 18:15:46", ""}) {
    double got = 0;
    EXPECT_FALSE(parse_utc_timestamp(bad, got)) << bad;
  }
}

TEST(LlmTrace, TheTraceCsvOfTextsReadsWithoutOutputLengths) {
  auto t = parse_llm_trace("arrival_seconds,text_or_length\n0.5,hello there\n0.25,17\n");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->format, "tessera-text");
  EXPECT_FALSE(t->has_output());
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0].prompt_tokens, 17);  // sorted by arrival
  EXPECT_EQ(t->rows[1].prompt_text, "hello there");
}

TEST(LlmTrace, WrittenTracesReadBackBitIdentical) {
  auto t = parse_llm_trace(sample("azure_2024.csv"));
  ASSERT_TRUE(t.has_value());
  auto back = parse_llm_trace(format_llm_trace(t->rows));
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  ASSERT_EQ(back->rows.size(), t->rows.size());
  for (size_t i = 0; i < t->rows.size(); ++i) {
    EXPECT_EQ(back->rows[i].arrival_seconds, t->rows[i].arrival_seconds);
    EXPECT_EQ(back->rows[i].prompt_tokens, t->rows[i].prompt_tokens);
    EXPECT_EQ(back->rows[i].output_tokens, t->rows[i].output_tokens);
  }
}

TEST(LlmTrace, MalformedTracesAreRefusedNamingTheLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"arrival_seconds,prompt_tokens,output_tokens\n0,4,4\n0.5,4\n", "trace line 3: 2 fields"},
      {"arrival_seconds,prompt_tokens,output_tokens\n0,4,4\n-1,4,4\n", "trace line 3: arrival_seconds '-1'"},
      {"arrival_seconds,prompt_tokens,output_tokens\n0,4,4\nnan,4,4\n", "trace line 3: arrival_seconds 'nan'"},
      {"arrival_seconds,prompt_tokens,output_tokens\n0,0,4\n", "trace line 2: prompt_tokens '0'"},
      {"arrival_seconds,prompt_tokens,output_tokens\n0,4,2.5\n", "trace line 2: output_tokens '2.5'"},
      {"arrival_seconds,prompt_tokens,output_tokens\n0,4,0x10\n", "trace line 2: output_tokens '0x10'"},
      {"# a comment\narrival_seconds,prompt_tokens,output_tokenz\n0,4,4\n", "trace line 2: unknown header"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,4\n2023-02-30 00:00:00,4,4\n",
       "trace line 3: TIMESTAMP '2023-02-30 00:00:00'"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4\n", "trace line 2: 2 fields; the header names 3"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,four\n", "trace line 2: GeneratedTokens 'four'"},
      {"TIMESTAMP,Tokens\n1,2\n", "trace line 1: a TIMESTAMP header without"},
      {"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,\"GPT-4,7,9,16,API log\n",
       "trace line 2: unterminated quote"},
      {"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,GPT-4,-7,9,16,API log\n",
       "trace line 2: Request tokens '-7'"},
      {"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,GPT-4,7,0,7,API log\n",
       "trace has no requests (1 rows with 0 tokens skipped)"},
      {"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1e12,GPT-4,7,9,16,API log\n",
       "trace line 2: Timestamp '1e12'"},
      {"", "trace has no requests"},
      {"# only a comment\n\n", "trace has no requests"},
  };
  for (const auto& [csv, want] : cases) {
    auto t = parse_llm_trace(csv);
    ASSERT_FALSE(t.has_value()) << "accepted: " << csv;
    EXPECT_NE(t.error().message().find(want), std::string::npos) << t.error().message() << "\nwanted: " << want;
  }
  auto missing = read_llm_trace("/nonexistent/trace.csv");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find("/nonexistent/trace.csv"), std::string::npos);
  auto named = read_llm_trace(sample_path("tessera.csv") + ".missing");
  EXPECT_FALSE(named.has_value());
}

// A seeded mutation loop (libFuzzer's mutations, in a unit test's budget): one byte of one line
// replaced, deleted or duplicated, a field dropped or doubled, a line cut. Every mutated trace is
// read into sane rows or refused by an error that names the mutated line (the header's mutations
// may name any line: they change the format).
TEST(LlmTrace, MutatedSamplesAreReadSanelyOrRefusedNamingTheMutatedLine) {
  const std::string alphabet = ",\".-+e0159 x:T\t#Z";
  splitmix64 rng(20261205);
  int refused = 0, read = 0;
  for (const auto& g : goldens) {
    const std::string text = sample(g.file);
    std::vector<std::string> lines;
    line_reader lr(text);
    for (std::string_view l; lr.next(l);) lines.emplace_back(l);
    for (int iter = 0; iter < 4000; ++iter) {
      std::vector<std::string> m = lines;
      const size_t at = size_t(rng.uniform(0, int64_t(m.size()) - 1));
      std::string& line = m[at];
      const int kind = int(rng.uniform(0, 5));
      const size_t pos = line.empty() ? 0 : size_t(rng.uniform(0, int64_t(line.size()) - 1));
      switch (kind) {
        case 0:  // replace a byte
          if (!line.empty()) line[pos] = alphabet[size_t(rng.uniform(0, int64_t(alphabet.size()) - 1))];
          break;
        case 1:  // delete a byte
          if (!line.empty()) line.erase(pos, 1);
          break;
        case 2:  // insert a byte
          line.insert(pos, 1, alphabet[size_t(rng.uniform(0, int64_t(alphabet.size()) - 1))]);
          break;
        case 3: {  // drop or double a field
          const size_t comma = line.find(',', pos);
          if (comma == std::string::npos) break;
          if (rng.uniform(0, 1)) {
            line.erase(comma, 1 + (line.find(',', comma + 1) == std::string::npos ? line.size() : line.find(',', comma + 1)) - comma - 1);
          } else {
            line.insert(comma, line.substr(pos, comma - pos) + ",");
          }
          break;
        }
        case 4:  // cut the line
          line.resize(pos);
          break;
        default:  // a huge or negative number in place of the line's first digit run
          if (const size_t d = line.find_first_of("0123456789"); d != std::string::npos)
            line.replace(d, 1, rng.uniform(0, 1) ? "-" : "99999999999");
          break;
      }
      std::string csv;
      for (const auto& l : m) csv += l + "\n";
      auto t = parse_llm_trace(csv);
      const int mutated = int(at) + 1;
      if (t.has_value()) {
        ++read;
        for (size_t i = 0; i < t->rows.size(); ++i) {
          const auto& r = t->rows[i];
          ASSERT_TRUE(std::isfinite(r.arrival_seconds) && r.arrival_seconds >= 0 && r.arrival_seconds <= 1e9) << csv;
          ASSERT_TRUE(r.prompt_tokens >= 1 || !r.prompt_text.empty()) << csv;
          ASSERT_GE(r.output_tokens, 0) << csv;
          ASSERT_LE(r.prompt_tokens, 1000000) << csv;
          ASSERT_LE(r.output_tokens, 1000000) << csv;
          if (t->has_output()) ASSERT_GE(r.output_tokens, 1) << csv;
          if (i) ASSERT_LE(t->rows[i - 1].arrival_seconds, r.arrival_seconds);
        }
        continue;
      }
      ++refused;
      const std::string msg = t.error().message();
      static const std::regex named("trace line ([0-9]+): ");
      std::smatch hit;
      if (mutated == 1) {
        // The header: a format not recognised names line 1; one recognised otherwise names a line.
        ASSERT_TRUE(std::regex_search(msg, hit, named) || msg.find("trace has no requests") != std::string::npos)
            << g.file << ": " << msg << "\n" << csv;
      } else {
        ASSERT_TRUE(std::regex_search(msg, hit, named)) << g.file << ": " << msg << "\n" << csv;
        EXPECT_EQ(std::stoi(hit[1]), mutated) << g.file << ": " << msg << "\n" << csv;
      }
    }
  }
  // Both outcomes happen (the loop is not vacuous).
  EXPECT_GT(refused, 1000);
  EXPECT_GT(read, 200);
}

}  // namespace
}  // namespace tessera
