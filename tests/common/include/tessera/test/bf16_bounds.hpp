// The bounds a bf16 forward is held to against the fp32 reference, and the comparison that
// measures them; every bf16 test uses these (docs/models.md, "bf16"). Header-only.
//
//   const auto a = tessera::test_support::compare_logits(bf16_logits, fp32_logits, num_labels);
//   EXPECT_LE(a.max_abs, kBf16MaxAbs);
//   EXPECT_GE(a.decided_agreement, kBf16Agreement);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::test_support {

// Bounds: max |logit difference| <= 0.05 and argmax agreement >= 99% on decided sequences.
// Measured differences are ~0.006 max on BERT-base, so 0.05 leaves 8x headroom for other seeds
// and CPUs while still catching a real bug (a wrong layout or a stale weight moves logits by 0.1
// or more). Logits beyond +-1 scale the bound by the largest |fp32 logit| (bf16's error is
// relative; tiny-odd's logits reach 4).
inline constexpr double kBf16MaxAbs = 0.05, kBf16Agreement = 0.99;

// A sequence is "decided" when fp32's best logit leads the next by at least this much: 3x the
// largest bf16 difference measured on BERT-base (0.006). Random-weight models give nearly the same
// logits to every input (fp32 margins from 0.001), so raw argmax agreement there measures how
// often two near-equal logits swap, not the bf16 path; both figures are printed.
inline constexpr double kBf16Decided = 0.02;

struct logit_agreement {
  double max_abs = 0, mean_abs = 0, agreement = 0, decided_agreement = 0;
  int decided = 0;
};

/// bf16 logits `got` against fp32's `want`, both [sequences, labels].
inline logit_agreement compare_logits(const std::vector<float>& got, const std::vector<float>& want, int labels) {
  logit_agreement a;
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size() || labels < 1) return a;
  for (size_t i = 0; i < got.size(); ++i) {
    a.max_abs = std::max(a.max_abs, double(std::fabs(got[i] - want[i])));
    a.mean_abs += std::fabs(got[i] - want[i]) / double(got.size());
  }
  const int n = static_cast<int>(got.size()) / labels;
  int decided_agree = 0;
  for (int s = 0; s < n; ++s) {
    auto first = [&](const std::vector<float>& v) { return v.begin() + s * labels; };
    const auto wbest = std::max_element(first(want), first(want) + labels) - first(want);
    const auto gbest = std::max_element(first(got), first(got) + labels) - first(got);
    a.agreement += wbest == gbest ? 1.0 / n : 0.0;
    double margin = 1e9;
    for (int l = 0; l < labels; ++l)
      if (l != wbest) margin = std::min(margin, double(first(want)[wbest] - first(want)[l]));
    if (margin >= kBf16Decided) {
      ++a.decided;
      decided_agree += wbest == gbest;
    }
  }
  a.decided_agreement = a.decided ? double(decided_agree) / a.decided : 0.0;
  return a;
}

}  // namespace tessera::test_support
