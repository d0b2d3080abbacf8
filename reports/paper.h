// paper.h — the UFP4 paper's reported numbers (arXiv 2606.20381, Ling Team, Ant Group, June 2026)
// as SCIENCE.md restates them: claim 3's BF16-relative gaps and claim 4's ablation losses. The
// report prints them beside ours, labelled as the paper's.
#pragma once

#include <string>
#include <vector>

namespace fp4::reports::paper {

inline constexpr const char* kCitation = "the UFP4 paper (arXiv 2606.20381, Ling Team, Ant Group, June 2026)";

// Claim 3: |L_fp4 - L_bf16| / L_bf16, the mean of the last 1000 training steps, for the strongest
// E2M1 recipe (fp32 1×16 scales, RHT on wgrad only, SR on dY) and UFP4 (uniform grid, fp32 1×16
// scales, RHT on all three GEMMs, SR only on dY).
struct ReportedGap {
  const char* model;        // "Dense 1.5B"
  double params;            // total parameters, as the model's name gives them
  double e2m1, ufp4;        // fractions: 0.012570 is 1.2570%
};
inline const std::vector<ReportedGap>& reported_gaps() {
  static const std::vector<ReportedGap> gaps = {
      {"Dense 1.5B", 1.5e9, 0.012570, 0.009673},
      {"MoE 7.9B", 7.9e9, 0.023596, 0.018469},
      {"MoE 124B", 124e9, 0.017308, 0.013863},
  };
  return gaps;
}

// Claim 4: the ablation on Dense 1.5B, mean LM loss. The uniform grid with fp32 1×16 scales
// throughout; `rht` names the GEMMs with the RHT, `sr_dy` whether dY is stochastically rounded.
struct AblationRow {
  const char* label;
  std::vector<std::string> rht;  // sorted: "dgrad", "fprop", "wgrad"
  bool sr_dy;
  double loss;
};
inline const std::vector<AblationRow>& ablation_rows() {
  static const std::vector<AblationRow> rows = {
      {"no RHT", {}, true, 1.89202},
      {"RHT on wgrad", {"wgrad"}, true, 1.88721},
      {"RHT on dgrad + wgrad", {"dgrad", "wgrad"}, true, 1.88912},
      {"RHT on fprop + wgrad", {"fprop", "wgrad"}, true, 1.88558},
      {"RHT on all three (UFP4)", {"dgrad", "fprop", "wgrad"}, true, 1.88079},
      {"RHT on all three, no SR", {"dgrad", "fprop", "wgrad"}, false, 1.88535},
  };
  return rows;
}

}  // namespace fp4::reports::paper
