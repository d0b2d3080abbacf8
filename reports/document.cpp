// document.cpp — see document.h.
#include "reports/document.h"

#include <cctype>

namespace fp4::reports {

std::string slug(const std::string& title) {
  std::string out;
  for (unsigned char c : title) {
    if (std::isalnum(c)) out += static_cast<char>(std::tolower(c));
    else if (c == ' ' || c == '-') out += '-';
    else if (c == '_') out += '_';
  }
  return out;
}

namespace {
int figures_in(const Section& s) {
  int n = 0;
  for (const Block& b : s.blocks) n += std::holds_alternative<Figure>(b) ? 1 : 0;
  for (const Section& sub : s.subsections) n += figures_in(sub);
  return n;
}
}  // namespace

int count_figures(const Document& doc) {
  int n = 0;
  for (const Section& s : doc.sections) n += figures_in(s);
  return n;
}

}  // namespace fp4::reports
