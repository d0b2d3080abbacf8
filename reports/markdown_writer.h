// markdown_writer.h — a Document as GitHub-flavoured Markdown: headings with GitHub's anchors, a
// table of contents, pipe tables, figures as images of the .svg files written beside it, code as
// fenced blocks, so a study committed to a repository reads well on a code-hosting site.
#pragma once

#include <string>

#include "reports/document.h"

namespace fp4::reports {

std::string write_markdown(const Document& doc);

}  // namespace fp4::reports
