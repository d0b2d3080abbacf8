// html_writer.cpp — see html_writer.h. Every text of the Document goes through html_escape; the
// only markup not produced here is the SVG of the figures, which svg_for_inline prepared from
// gnuplot's output (gnuplot escapes the text it was given).
#include "reports/html_writer.h"

#include <fmt/format.h>

#include "reports/escape.h"

namespace fp4::reports {

namespace {

// System fonts only: nothing is fetched.
constexpr const char* kStyle = R"css(
:root { --fg: #1b1b1b; --muted: #555; --rule: #d0d0d0; --band: #f6f6f6; --note: #fff4e0; --note-rule: #e69f00; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1080px; padding: 1.5rem 1.25rem 4rem; color: var(--fg); background: #fff;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", "Liberation Sans", sans-serif; }
h1 { font-size: 1.8rem; margin: 0.2rem 0 0.3rem; }
h2 { font-size: 1.4rem; margin: 2.2rem 0 0.6rem; padding-bottom: 0.2rem; border-bottom: 1px solid var(--rule); }
h3 { font-size: 1.12rem; margin: 1.6rem 0 0.5rem; }
p, ul { margin: 0.5rem 0; }
.subtitle { color: var(--muted); margin-bottom: 1rem; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace; font-size: 0.88em; }
code { background: var(--band); padding: 0 0.2em; border-radius: 3px; overflow-wrap: anywhere; }
pre { background: var(--band); padding: 0.7rem 0.9rem; overflow-x: auto; border-radius: 4px; white-space: pre; }
pre code { background: none; padding: 0; }
nav.toc { background: var(--band); padding: 0.6rem 1rem; border-radius: 4px; }
nav.toc ol { margin: 0.2rem 0; padding-left: 1.4rem; }
.note { background: var(--note); border-left: 4px solid var(--note-rule); padding: 0.45rem 0.8rem; margin: 0.7rem 0; }
.table-wrap { overflow-x: auto; margin: 0.7rem 0; }
table { border-collapse: collapse; font-size: 0.9rem; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 0.2rem 0; }
th, td { border-bottom: 1px solid var(--rule); padding: 0.22rem 0.6rem; text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; }
td.num, th.num { text-align: right; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fbfbfb; }
.sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.35em; border-radius: 2px; vertical-align: -0.05em; }
.data { color: var(--muted); font-size: 0.85rem; }
figure { margin: 1rem 0 1.4rem; }
figure .plot svg { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: var(--fg); margin-top: 0.3rem; }
details summary { cursor: pointer; color: var(--muted); }
@media print {
  body { max-width: none; padding: 0; font-size: 10pt; }
  nav.toc { background: none; border: 1px solid var(--rule); }
  h2 { break-after: avoid; page-break-after: avoid; }
  figure, .table-wrap, pre { break-inside: avoid; page-break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
  details > *:not(summary) { display: block; }
}
)css";

// Inline text is one line in both formats (a name's line break would end a Markdown table row),
// so the HTML shows it the same way.
std::string text_html(const std::string& s) { return html_escape(one_line(s)); }

std::string inline_html(const Inline& content) {
  std::string out;
  for (const Span& s : content) {
    switch (s.kind) {
      case Span::Kind::text: out += text_html(s.text); break;
      case Span::Kind::code: out += "<code>" + text_html(s.text) + "</code>"; break;
      case Span::Kind::strong: out += "<strong>" + text_html(s.text) + "</strong>"; break;
      case Span::Kind::link:
        out += "<a href=\"" + html_escape(s.href) + "\">" + text_html(s.text) + "</a>";
        break;
    }
  }
  return out;
}

std::string data_line(const std::string& csv) {
  if (csv.empty()) return "";
  return " <span class=\"data\">Data: <a href=\"" + html_escape(csv) + "\">" + html_escape(csv) + "</a></span>";
}

struct HtmlWriter {
  std::string out;
  int figure_number = 0;

  void block(const Block& b) {
    if (const auto* p = std::get_if<Paragraph>(&b)) {
      out += "<p>" + inline_html(p->content) + "</p>\n";
    } else if (const auto* n = std::get_if<Note>(&b)) {
      out += "<p class=\"note\">" + inline_html(n->content) + "</p>\n";
    } else if (const auto* l = std::get_if<BulletList>(&b)) {
      out += "<ul>\n";
      for (const Inline& item : l->items) out += "<li>" + inline_html(item) + "</li>\n";
      out += "</ul>\n";
    } else if (const auto* c = std::get_if<CodeBlock>(&b)) {
      const std::string pre = "<pre><code>" + html_escape(c->text) + "</code></pre>\n";
      if (c->summary.empty()) out += pre;
      else out += "<details><summary>" + html_escape(c->summary) + "</summary>\n" + pre + "</details>\n";
    } else if (const auto* t = std::get_if<Table>(&b)) {
      table(*t);
    } else if (const auto* f = std::get_if<Figure>(&b)) {
      ++figure_number;
      out += "<figure id=\"figure-" + html_escape(f->id) + "\">\n<div class=\"plot\">" + f->svg_inline + "</div>\n";
      out += fmt::format("<figcaption><strong>Figure {}. {}</strong> ", figure_number, text_html(f->title)) +
             inline_html(f->caption) + data_line(f->csv) + "</figcaption>\n</figure>\n";
    }
  }

  void table(const Table& t) {
    out += "<div class=\"table-wrap\"><table" + (t.id.empty() ? std::string() : " id=\"" + html_escape(t.id) + "\"") + ">\n";
    if (!t.caption.empty() || !t.csv.empty()) out += "<caption>" + text_html(t.caption) + data_line(t.csv) + "</caption>\n";
    auto numeric = [&](size_t c) { return c < t.numeric.size() && t.numeric[c]; };
    out += "<thead><tr>";
    for (size_t c = 0; c < t.header.size(); ++c)
      out += std::string(numeric(c) ? "<th class=\"num\">" : "<th>") + text_html(t.header[c]) + "</th>";
    out += "</tr></thead>\n<tbody>\n";
    for (const auto& row : t.rows) {
      out += "<tr>";
      for (size_t c = 0; c < row.size(); ++c) {
        out += numeric(c) ? "<td class=\"num\">" : "<td>";
        if (!row[c].swatch.empty())
          out += "<span class=\"sw\" style=\"background:" + html_escape(row[c].swatch) + "\"></span>";
        out += text_html(row[c].text) + "</td>";
      }
      out += "</tr>\n";
    }
    out += "</tbody></table></div>\n";
  }

  void section(const Section& s, int level) {
    out += fmt::format("<section id=\"{}\">\n<h{}>{}</h{}>\n", html_escape(s.id), level, text_html(s.title), level);
    for (const Block& b : s.blocks) block(b);
    for (const Section& sub : s.subsections) section(sub, level + 1);
    out += "</section>\n";
  }
};

}  // namespace

std::string write_html(const Document& doc) {
  HtmlWriter w;
  w.out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  w.out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // Belt and braces: even if something in the page asked for a resource, the browser may not
  // fetch it (no script, no remote image, style or font; inline styles only).
  w.out += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "img-src data:\">\n";
  w.out += "<title>" + text_html(doc.title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  w.out += "<header>\n<h1>" + text_html(doc.title) + "</h1>\n<p class=\"subtitle\">" + inline_html(doc.subtitle) +
           "</p>\n</header>\n";
  w.out += "<nav class=\"toc\"><strong>Contents</strong>\n<ol>\n";
  for (const Section& s : doc.sections) {
    w.out += "<li><a href=\"#" + html_escape(s.id) + "\">" + html_escape(s.title) + "</a>";
    if (!s.subsections.empty()) {
      w.out += "\n<ol>\n";
      for (const Section& sub : s.subsections)
        w.out += "<li><a href=\"#" + html_escape(sub.id) + "\">" + html_escape(sub.title) + "</a></li>\n";
      w.out += "</ol>\n";
    }
    w.out += "</li>\n";
  }
  w.out += "</ol>\n</nav>\n<main>\n";
  for (const Section& s : doc.sections) w.section(s, 2);
  w.out += "</main>\n</body>\n</html>\n";
  return w.out;
}

}  // namespace fp4::reports
