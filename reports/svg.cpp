// svg.cpp — see svg.h.
#include "reports/svg.h"

#include <set>
#include <stdexcept>
#include <string_view>

#include "reports/escape.h"

namespace fp4::reports {

namespace {

// The end of the tag starting at `start` ('<'): the '>' outside quoted attribute values.
size_t tag_end(const std::string& s, size_t start) {
  char quote = 0;
  for (size_t i = start + 1; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '>') {
      return i;
    }
  }
  throw std::runtime_error("gnuplot's SVG ends inside a tag");
}

// The value of every `id` attribute in the tags of `s`.
std::set<std::string> defined_ids(const std::string& s) {
  std::set<std::string> ids;
  for (size_t i = s.find('<'); i != std::string::npos; i = s.find('<', i + 1)) {
    const size_t end = tag_end(s, i);
    const std::string_view tag(s.data() + i, end - i);
    for (size_t k = tag.find(" id="); k != std::string_view::npos; k = tag.find(" id=", k + 1)) {
      const char q = tag[k + 4];
      const size_t close = tag.find(q, k + 5);
      if (close != std::string_view::npos) ids.insert(std::string(tag.substr(k + 5, close - k - 5)));
    }
    i = end;
  }
  return ids;
}

// In one tag: id='X' → id='P-X', href='#X' → href='#P-X', url(#X) → url(#P-X) for the X in `ids`.
std::string prefix_refs(std::string_view tag, const std::set<std::string>& ids, const std::string& prefix) {
  std::string out;
  size_t i = 0;
  while (i < tag.size()) {
    size_t name_start = std::string_view::npos;
    if (tag.compare(i, 4, " id=") == 0 && i + 4 < tag.size() && (tag[i + 4] == '"' || tag[i + 4] == '\'')) {
      out += tag.substr(i, 5);
      name_start = i + 5;
    } else if (tag.compare(i, 6, "href=\"") == 0 || tag.compare(i, 6, "href='") == 0) {
      if (i + 6 < tag.size() && tag[i + 6] == '#') {
        out += tag.substr(i, 7);
        name_start = i + 7;
      }
    } else if (tag.compare(i, 5, "url(#") == 0) {
      out += tag.substr(i, 5);
      name_start = i + 5;
    }
    if (name_start == std::string_view::npos) {
      out += tag[i++];
      continue;
    }
    size_t name_end = name_start;
    while (name_end < tag.size() && tag[name_end] != '"' && tag[name_end] != '\'' && tag[name_end] != ')')
      ++name_end;
    const std::string name(tag.substr(name_start, name_end - name_start));
    out += ids.count(name) ? prefix + "-" + name : name;
    i = name_end;
  }
  return out;
}

}  // namespace

std::string svg_for_inline(const std::string& svg, const std::string& id_prefix, const std::string& title) {
  const size_t begin = svg.find("<svg");
  const size_t last = svg.rfind("</svg>");
  if (begin == std::string::npos || last == std::string::npos || last < begin)
    throw std::runtime_error("gnuplot returned no SVG document (" + std::to_string(svg.size()) + " bytes)");
  std::string body = svg.substr(begin, last + 6 - begin);
  if (body.find("<script") != std::string::npos)
    throw std::runtime_error("gnuplot's SVG contains a script element (was the 'mouse' option set?)");
  const std::set<std::string> ids = defined_ids(body);
  std::string out;
  out.reserve(body.size() + body.size() / 16);
  size_t i = 0;
  while (i < body.size()) {
    const size_t open = body.find('<', i);
    if (open == std::string::npos) {
      out.append(body, i, std::string::npos);
      break;
    }
    out.append(body, i, open - i);
    const size_t end = tag_end(body, open);
    out += prefix_refs(std::string_view(body).substr(open, end + 1 - open), ids, id_prefix);
    i = end + 1;
  }
  // gnuplot names each plot group <title>gnuplot_plot_N</title>, which a browser shows as a tooltip.
  for (size_t t = out.find("<title>gnuplot_plot_"); t != std::string::npos; t = out.find("<title>gnuplot_plot_", t)) {
    const size_t close = out.find("</title>", t);
    if (close == std::string::npos) break;
    out.erase(t, close + 8 - t);
  }
  const std::string gnuplot_title = "<title>Gnuplot</title>";
  if (const size_t t = out.find(gnuplot_title); t != std::string::npos)
    out.replace(t, gnuplot_title.size(), "<title>" + html_escape(title) + "</title>");
  return out;
}

}  // namespace fp4::reports
