// svg.h — gnuplot's SVG made ready to be inlined into an HTML page beside other figures, and a
// cheap structural check of what gnuplot returned.
#pragma once

#include <string>

namespace fp4::reports {

// The <svg> element alone (no XML declaration, DOCTYPE or comments before it), with every id
// gnuplot defined (gnuplot_canvas, gpPt0, textbox, gnuplot_plot_1, ...) and every reference to one
// (href="#...", url(#...)) prefixed by `id_prefix`, so that several figures in one page keep
// distinct ids; gnuplot's <title>Gnuplot</title> becomes `title` (escaped). Text between tags is
// left as gnuplot wrote it (gnuplot escapes < and & in text). Throws std::runtime_error when `svg`
// holds no <svg ...>...</svg> or contains a <script> element.
std::string svg_for_inline(const std::string& svg, const std::string& id_prefix, const std::string& title);

}  // namespace fp4::reports
