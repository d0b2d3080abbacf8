// escape.h — every user-supplied string (sweep, recipe, run and grid names, paths, error texts)
// reaches an output format only through one of these functions, so a name can never be read as
// markup, as a gnuplot command, or as a CSV field separator.
#pragma once

#include <string>
#include <string_view>

namespace fp4::reports {

// HTML text and attribute values: & < > " ' become entities. Safe in element content and in
// quoted attribute values alike.
std::string html_escape(std::string_view s);

// A gnuplot string literal, quotes included: single-quoted (gnuplot does no backslash, backquote
// or macro processing inside single quotes), a ' doubled, and line breaks (which would end the
// command) and other control characters replaced by spaces. Used with `noenhanced` text, so the
// enhanced-text metacharacters ^ _ @ & { } ~ are printed as themselves.
std::string gnuplot_quote(std::string_view s);

// Text inside GitHub-flavoured Markdown (paragraphs and table cells): HTML specials as entities
// (GFM passes raw HTML through), Markdown punctuation backslash-escaped, line breaks and control
// characters as spaces (a table cell is one line), and | escaped.
std::string markdown_escape(std::string_view s);

// Markdown inline code: backtick-delimited with a fence longer than any backtick run inside; line
// breaks as spaces. (Inside code spans GFM interprets nothing, not even entities.)
std::string markdown_code(std::string_view s);

// One CSV field (RFC 4180): quoted when it holds a comma, a quote, a line break or leading or
// trailing space; quotes doubled.
std::string csv_field(std::string_view s);

// A string as one line: control characters (line breaks, tabs, ESC ...) become spaces. For names
// placed into one-line contexts (terminal output, a figure's title).
std::string one_line(std::string_view s);

}  // namespace fp4::reports
