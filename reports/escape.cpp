// escape.cpp — see escape.h.
#include "reports/escape.h"

#include <algorithm>

namespace fp4::reports {

namespace {

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\0': out += "&#xFFFD;"; break;  // NUL is not allowed in HTML text
      default: out += c;
    }
  }
  return out;
}

std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (is_control(static_cast<unsigned char>(c))) c = ' ';
  return out;
}

std::string gnuplot_quote(std::string_view s) {
  std::string out = "'";
  for (char c : one_line(s)) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

std::string markdown_escape(std::string_view s) {
  // The punctuation that can start or end GFM markup (emphasis, code, links and images, headings,
  // raw HTML, strikethrough, table columns, math) is backslash-escaped; the rest (digits, '.', '%',
  // '-' inside a number) stays readable in the .md source.
  static constexpr std::string_view kMarkup = "\\`*_[]#|~!$";
  const std::string text = one_line(s);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        // A leading + - = would start a list or a setext heading at the start of a line.
        if (kMarkup.find(c) != std::string_view::npos || (i == 0 && (c == '+' || c == '-' || c == '=')))
          out += '\\';
        out += c;
    }
  }
  return out;
}

std::string markdown_code(std::string_view s) {
  const std::string text = one_line(s);
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  // A space inside the fences when the text starts or ends with a backtick (GFM strips one).
  const bool pad = !text.empty() && (text.front() == '`' || text.back() == '`');
  const std::string space = pad ? " " : "";
  return fence + space + text + space + fence;
}

std::string csv_field(std::string_view s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += "\"\"";
    else out += c;
  }
  return out + "\"";
}

}  // namespace fp4::reports
