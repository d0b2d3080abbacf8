// document.h — a report's content as plain data: sections of paragraphs, notes, tables, figures
// and code blocks. The same Document is written as HTML (html_writer.h) and as GitHub-flavoured
// Markdown (markdown_writer.h), so the two always say the same thing. All text here is plain text:
// each writer escapes it for its own format.
#pragma once

#include <string>
#include <variant>
#include <vector>

namespace fp4::reports {

// A run of inline text.
struct Span {
  enum class Kind { text, code, strong, link } kind = Kind::text;
  std::string text;
  std::string href;  // links only: a relative path of a file the report wrote, or "#section-id"
};
using Inline = std::vector<Span>;

inline Span text(std::string s) { return {Span::Kind::text, std::move(s), ""}; }
inline Span code(std::string s) { return {Span::Kind::code, std::move(s), ""}; }
inline Span strong(std::string s) { return {Span::Kind::strong, std::move(s), ""}; }
inline Span link(std::string s, std::string href) { return {Span::Kind::link, std::move(s), std::move(href)}; }

struct Paragraph {
  Inline content;
};

// Something the reader must not miss: missing runs, missing fits, a caveat about scale.
struct Note {
  Inline content;
};

struct BulletList {
  std::vector<Inline> items;
};

struct CodeBlock {
  std::string language;  // "sh", "toml", or ""
  std::string text;
  std::string summary;   // non-empty: shown collapsed under this summary (HTML <details>)
};

struct Cell {
  std::string text;
  std::string swatch;    // "#rrggbb": a colour square before the text (the recipe's colour)
  Cell() = default;
  Cell(std::string t, std::string colour = {}) : text(std::move(t)), swatch(std::move(colour)) {}
  Cell(const char* t) : text(t) {}
};

struct Table {
  std::string id;                         // anchor ("" for none)
  std::string caption;
  std::vector<std::string> header;
  std::vector<bool> numeric;              // per column: right-aligned
  std::vector<std::vector<Cell>> rows;
  std::string csv;                        // the sidecar holding this table's data ("" for none)
};

struct Figure {
  std::string id;                         // file stem (figures/<id>.svg); the HTML anchor is figure-<id>
  std::string title;
  Inline caption;
  std::string svg_inline;                 // for HTML (svg_for_inline)
  std::string svg_file;                   // relative path of the standalone SVG
  std::string csv;                        // the sidecar holding the plotted data
};

using Block = std::variant<Paragraph, Note, BulletList, CodeBlock, Table, Figure>;

struct Section {
  std::string id;                         // anchor: GitHub's slug of the title
  std::string title;
  std::vector<Block> blocks;
  std::vector<Section> subsections;
};

struct Document {
  std::string title;
  Inline subtitle;
  std::vector<Section> sections;
};

// GitHub's heading anchor for a title of ours: lower case, spaces as '-', other punctuation
// dropped. (Used for every section id, so the HTML and the Markdown link the same way.)
std::string slug(const std::string& title);

}  // namespace fp4::reports
