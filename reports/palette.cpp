// palette.cpp — see palette.h.
#include "reports/palette.h"

#include <algorithm>
#include <set>

namespace fp4::reports {

namespace {

// Okabe & Ito (2008), without the yellow (too light for lines on white).
const std::vector<std::string> kColors = {"#000000", "#D55E00", "#0072B2", "#009E73",
                                          "#CC79A7", "#E69F00", "#56B4E9"};
// Beyond them, for custom recipes (an ablation grid has ten): Paul Tol's "muted" qualitative set,
// also colour-blind safe, without its grey (the colour of an unknown recipe) and its pale sand.
const std::vector<std::string> kMoreColors = {"#882255", "#117733", "#332288", "#CC6677", "#44AA99",
                                              "#999933", "#AA4499", "#88CCEE"};
// The presets' fixed slots, in NUMERICS.md §5's order.
const std::vector<std::string> kPresetOrder = {"bf16", "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3"};
const std::vector<int> kPoints = {7, 5, 9, 11, 13, 15, 6, 4, 8};

}  // namespace

Palette::Palette(const std::vector<std::string>& recipes) {
  const std::set<std::string> present(recipes.begin(), recipes.end());
  std::vector<std::string> custom;
  for (const std::string& r : present)
    if (std::find(kPresetOrder.begin(), kPresetOrder.end(), r) == kPresetOrder.end()) custom.push_back(r);
  // Presets take their own slot whether or not the others are present; custom recipes fill the
  // slots no present preset uses, then wrap around with a new dash type.
  std::set<size_t> used;
  for (size_t i = 0; i < kPresetOrder.size(); ++i)
    if (present.count(kPresetOrder[i])) {
      order_.push_back(kPresetOrder[i]);
      styles_[kPresetOrder[i]] = {kColors[i % kColors.size()], 1, kPoints[i % kPoints.size()]};
      used.insert(i % kColors.size());
    }
  std::vector<std::string> free;
  for (size_t c = 0; c < kColors.size(); ++c)
    if (!used.count(c)) free.push_back(kColors[c]);
  free.insert(free.end(), kMoreColors.begin(), kMoreColors.end());
  for (size_t k = 0; k < custom.size(); ++k) {
    const std::string& r = custom[k];
    RecipeStyle st;
    if (k < free.size()) {
      st.color = free[k];
    } else {  // more recipes than colours: the custom colours again, with another dash type
      const size_t j = k - free.size();
      st.color = free[j % free.size()];
      st.dash = 2 + static_cast<int>(j / free.size());
    }
    st.point = kPoints[order_.size() % kPoints.size()];
    styles_[r] = st;
    order_.push_back(r);
  }
}

RecipeStyle Palette::style(const std::string& recipe) const {
  const auto it = styles_.find(recipe);
  return it != styles_.end() ? it->second : RecipeStyle{"#999999", 1, 1};
}

}  // namespace fp4::reports
