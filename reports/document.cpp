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

}  // namespace fp4::reports
