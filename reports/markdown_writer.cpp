// markdown_writer.cpp — see markdown_writer.h. Text goes through markdown_escape, code through
// markdown_code or a fence longer than any backtick run inside it.
#include "reports/markdown_writer.h"

#include <fmt/format.h>

#include <algorithm>

#include "reports/escape.h"

namespace fp4::reports {

namespace {

// A link target we wrote ourselves (a relative file name or "#anchor"): only the characters that
// would end the target are percent-encoded.
std::string link_target(const std::string& href) {
  std::string out;
  for (unsigned char c : href) {
    if (c == ' ' || c == '(' || c == ')' || c == '<' || c == '>' || c < 0x20) out += fmt::format("%{:02X}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

std::string inline_md(const Inline& content) {
  std::string out;
  for (const Span& s : content) {
    switch (s.kind) {
      case Span::Kind::text: out += markdown_escape(s.text); break;
      case Span::Kind::code: out += markdown_code(s.text); break;
      case Span::Kind::strong: {
        // GFM closes ** only after a non-space character: "Scale: " keeps its space outside.
        const size_t end = s.text.find_last_not_of(' ') + 1;  // 0 when blank
        out += end == 0 ? s.text : fmt::format("**{}**{}", markdown_escape(s.text.substr(0, end)), s.text.substr(end));
        break;
      }
      case Span::Kind::link: out += fmt::format("[{}]({})", markdown_escape(s.text), link_target(s.href)); break;
    }
  }
  return out;
}

std::string fence_for(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

struct MarkdownWriter {
  std::string out;
  int figure_number = 0;

  void block(const Block& b) {
    if (const auto* p = std::get_if<Paragraph>(&b)) {
      out += inline_md(p->content) + "\n\n";
    } else if (const auto* n = std::get_if<Note>(&b)) {
      out += "> " + inline_md(n->content) + "\n\n";
    } else if (const auto* l = std::get_if<BulletList>(&b)) {
      for (const Inline& item : l->items) out += "- " + inline_md(item) + "\n";
      out += "\n";
    } else if (const auto* c = std::get_if<CodeBlock>(&b)) {
      const std::string fence = fence_for(c->text);
      std::string body = c->text;
      if (!body.empty() && body.back() != '\n') body += '\n';
      // The info string is ours ("sh", "toml"); the summary goes into HTML, escaped.
      if (!c->summary.empty()) out += "<details><summary>" + html_escape(one_line(c->summary)) + "</summary>\n\n";
      out += fence + c->language + "\n" + body + fence + "\n\n";
      if (!c->summary.empty()) out += "</details>\n\n";
    } else if (const auto* t = std::get_if<Table>(&b)) {
      table(*t);
    } else if (const auto* f = std::get_if<Figure>(&b)) {
      ++figure_number;
      out += "![" + markdown_escape(f->title) + "](" + link_target(f->svg_file) + ")\n\n";
      out += fmt::format("**Figure {}. {}** ", figure_number, markdown_escape(f->title)) + inline_md(f->caption);
      if (!f->csv.empty()) out += " Data: [" + markdown_escape(f->csv) + "](" + link_target(f->csv) + ")";
      out += "\n\n";
    }
  }

  void table(const Table& t) {
    if (!t.caption.empty() || !t.csv.empty()) {
      out += "**" + markdown_escape(t.caption) + "**";
      if (!t.csv.empty()) out += " Data: [" + markdown_escape(t.csv) + "](" + link_target(t.csv) + ")";
      out += "\n\n";
    }
    auto numeric = [&](size_t c) { return c < t.numeric.size() && t.numeric[c]; };
    out += "|";
    for (const std::string& h : t.header) out += fmt::format(" {} |", markdown_escape(h));
    out += "\n|";
    for (size_t c = 0; c < t.header.size(); ++c) out += numeric(c) ? " ---: |" : " --- |";
    out += "\n";
    for (const auto& row : t.rows) {
      out += "|";
      for (size_t c = 0; c < t.header.size(); ++c) {
        const std::string cell = c < row.size() ? markdown_escape(row[c].text) : "";
        out += " " + cell + " |";
      }
      out += "\n";
    }
    out += "\n";
  }

  void section(const Section& s, int level) {
    out += std::string(static_cast<size_t>(level), '#') + " " + markdown_escape(s.title) + "\n\n";
    for (const Block& b : s.blocks) block(b);
    for (const Section& sub : s.subsections) section(sub, level + 1);
  }
};

}  // namespace

std::string write_markdown(const Document& doc) {
  MarkdownWriter w;
  w.out += "# " + markdown_escape(doc.title) + "\n\n" + inline_md(doc.subtitle) + "\n\n";
  w.out += "**Contents**\n\n";
  int n = 0;
  for (const Section& s : doc.sections) {
    w.out += fmt::format("{}. [{}](#{})\n", ++n, markdown_escape(s.title), link_target(s.id));
    for (const Section& sub : s.subsections)
      w.out += "   - [" + markdown_escape(sub.title) + "](#" + link_target(sub.id) + ")\n";
  }
  w.out += "\n";
  for (const Section& s : doc.sections) w.section(s, 2);
  return w.out;
}

}  // namespace fp4::reports
