// palette.h — one colour (and line style) per recipe, the same in every figure and table of a
// report. Colours are Okabe & Ito's colour-blind-safe set; the presets keep fixed colours across
// reports (bf16 black, e2m1 vermillion, ufp4 blue, ...), custom recipes take the remaining ones in
// name order, then Paul Tol's muted set (also colour-blind safe), and beyond those the custom
// colours repeat with another dash type and point shape.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fp4::reports {

struct RecipeStyle {
  std::string color;  // "#rrggbb"
  int dash = 1;       // gnuplot dash type
  int point = 7;      // gnuplot point type
};

class Palette {
 public:
  explicit Palette(const std::vector<std::string>& recipes);
  // The style of a recipe of the study; an unknown one gets grey.
  RecipeStyle style(const std::string& recipe) const;
  // The recipes in palette order (presets first, in their fixed order, then the rest by name).
  const std::vector<std::string>& order() const { return order_; }

 private:
  std::vector<std::string> order_;
  std::map<std::string, RecipeStyle> styles_;
};

}  // namespace fp4::reports
