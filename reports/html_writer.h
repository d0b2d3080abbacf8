// html_writer.h — a Document as ONE self-contained HTML file: inline CSS, inline SVG figures, no
// script, no font, image or style sheet from anywhere else, so it renders the same with the
// network off; a table of contents; readable on a laptop screen and on paper (print styles).
#pragma once

#include <string>

#include "reports/document.h"

namespace fp4::reports {

std::string write_html(const Document& doc);

}  // namespace fp4::reports
