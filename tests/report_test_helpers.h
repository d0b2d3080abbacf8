// report_test_helpers.h — what the report tests share: a tiny real CPU study made with the fp4lab
// binary, hand-built stores whose names can be anything, `fp4lab report` as a child process, and
// readers for what a report is made of: XML (the SVG figures), the HTML DOM (libxml2's HTML
// parser), PNG screenshots (libpng).
#pragma once

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <png.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"
#include "sweeps/spec.h"
#include "tests/sweeps_test_helpers.h"
#include "tests/test_support.h"

namespace fp4::test {

// ---- Studies ------------------------------------------------------------------------------------

// The tiny real study of the report tests, the shape of results/first-study/ at toy size: four
// TOML files beside each other naming one store, run on the CPU by the fp4lab binary.
//   study.toml        the main grid: d1 and a 2-block d_model-64 model (L2-d64) × 256 and 512 tokens
//                     × bf16, e2m1, ufp4, nvfp4, seed 0, with a [fit] table (16 runs)
//   noise-floor.toml  d1 × both lengths × the four recipes × seeds 0, 1, 2 (24; 8 shared)
//   ablation.toml     L2-d64 × 256 tokens × bf16, ufp4, ufp4-rht-none, ufp4-no-sr, e2m1, e2m1-clip3
//                     ([recipes.*] tables as ablation.toml's) × seeds 0, 1, 2 (18; 3 shared)
//   probes.toml       L2-d64 × 512 tokens × e2m1, e2m1-rht-all, ufp4-rht-none, ufp4, probes every 2
//                     steps (4; a config of their own: none shared)
// 51 runs of 2 or 4 steps of 128 tokens, an evaluation every step: a few seconds on two cores.
struct TinyStudy {
  std::filesystem::path toml, noise_toml, ablation_toml, probes_toml, store;
  std::vector<std::filesystem::path> tomls() const { return {toml, noise_toml, ablation_toml, probes_toml}; }
};
inline std::string tiny_study_base(const std::string& name, int probe_every) {
  return "[sweep]\nname = \"" + name + "\"\nstore = \"tiny.db\"\n"
         "[data]\n"
         "source = \"synthetic:markov?order=1&vocab=64&branch=4&seed=1\"\n"
         "[model]\nseq_len = 32\n"
         "[train]\nbatch_tokens = 128\nmicro_batch = 2\nlr = 3e-3\n"
         "[eval]\nevery = 1\ntokens = 128\n"
         "[probe]\nevery = " + std::to_string(probe_every) + "\n"
         "[checkpoint]\nevery = 100\n"
         "[executor]\ncpu_jobs = 2\nthreads_per_job = 1\n";
}
// Writes the four TOML files (nothing runs).
inline TinyStudy write_tiny_study(const std::filesystem::path& dir) {
  TinyStudy s;
  s.toml = dir / "study.toml";
  s.noise_toml = dir / "noise-floor.toml";
  s.ablation_toml = dir / "ablation.toml";
  s.probes_toml = dir / "probes.toml";
  s.store = dir / "tiny.db";
  const std::string recipes4 = "recipe = [\"bf16\", \"e2m1\", \"ufp4\", \"nvfp4\"]\n";
  spit(s.toml, tiny_study_base("tiny", 0) +
                   "[grid]\nmodel = [\"d1\", {n_layers = 2, d_model = 64}]\ntokens = [256, 512]\n" + recipes4 +
                   "seed = [0]\n[fit]\nlaw = [\"chinchilla\", \"precision\"]\n");
  spit(s.noise_toml, tiny_study_base("tiny-noise", 0) + "[grid]\nmodel = [\"d1\"]\ntokens = [256, 512]\n" + recipes4 +
                         "seed = [0, 1, 2]\n");
  spit(s.ablation_toml,
       tiny_study_base("tiny-ablation", 0) +
           "[grid]\nmodel = [{n_layers = 2, d_model = 64}]\ntokens = [256]\n"
           "recipe = [\"bf16\", \"ufp4\", \"ufp4-rht-none\", \"ufp4-no-sr\", \"e2m1\", \"e2m1-clip3\"]\nseed = [0, 1, 2]\n"
           "[recipes.ufp4-rht-none]\nbase = \"ufp4\"\nrht = []\n"
           "[recipes.ufp4-no-sr]\nbase = \"ufp4\"\nsr = []\n"
           "[recipes.e2m1-clip3]\nbase = \"e2m1\"\nclip = 3.0\nrht = [\"fprop\", \"dgrad\", \"wgrad\"]\n");
  spit(s.probes_toml, tiny_study_base("tiny-probes", 2) +
                          "[grid]\nmodel = [{n_layers = 2, d_model = 64}]\ntokens = [512]\n"
                          "recipe = [\"e2m1\", \"e2m1-rht-all\", \"ufp4-rht-none\", \"ufp4\"]\nseed = [0]\n"
                          "[recipes.e2m1-rht-all]\nbase = \"e2m1\"\nrht = [\"fprop\", \"dgrad\", \"wgrad\"]\n"
                          "[recipes.ufp4-rht-none]\nbase = \"ufp4\"\nrht = []\n");
  return s;
}
// `fp4lab sweep run` of one of its TOML files, run in the study's directory.
inline void run_tiny_grid(const std::filesystem::path& toml) {
  const CliRun r = run_fp4lab("sweep run --plain '" + toml.string() + "'", toml.parent_path());
  if (r.exit_code != 0) throw std::runtime_error("sweep run " + toml.string() + " failed: " + r.err);
}
inline TinyStudy make_tiny_study(const std::filesystem::path& dir) {
  TinyStudy s = write_tiny_study(dir);
  for (const auto& toml : s.tomls()) run_tiny_grid(toml);
  return s;
}

// A store built row by row through the Store API, so that names, errors and paths can hold
// anything (the TOML's rules are bypassed on purpose).
class HandStudy {
 public:
  HandStudy(const std::filesystem::path& dir, const std::string& name) : dir_(dir) {
    spec_.file = dir / "hand.toml";
    spec_.base_dir = dir;
    spec_.text = "# a hand-built study named " + name + "\n";
    spec_.text_hash = "hash-" + name;
    spec_.name = name;
    spec_.store = dir / "hand.db";
    spec_.run_root = dir / "runs";
    spec_.axis_names = {"model", "recipe", "seed"};
  }
  // The TOML path the grid is recorded with (shown in the report and in its commands).
  void set_file(const std::filesystem::path& file) { spec_.file = file; }
  // A point (N non-embedding parameters, D tokens); runs with the same `match` are BF16 twins.
  // Returns a copy (later adds move the points).
  sweeps::GridPoint add(const std::string& name, const std::string& recipe, const std::string& model, int64_t n,
                         int64_t d, uint64_t seed, const std::string& match, int64_t steps = 10) {
    sweeps::GridPoint p;
    p.id = "id-" + std::to_string(spec_.points.size()) + "-" + std::to_string(std::hash<std::string>{}(name));
    p.name = name;
    p.config = {{"data", "synthetic:markov?order=1&vocab=64"},
                {"recipe", recipe},
                {"train", {{"steps", steps}, {"batch_tokens", d / steps}, {"seed", seed}}},
                {"match", match}};
    p.canonical = p.config.dump();
    p.match_key = match;
    p.axes = {{"model", model}, {"recipe", recipe}, {"seed", std::to_string(seed)}};
    p.recipe_label = recipe;
    p.baseline = recipe == "bf16";
    p.model_label = model;
    p.n_params = n + 1000;
    p.n_params_nonembedding = n;
    p.n_params_active_nonembedding = n;
    p.tokens = d;
    p.seed = seed;
    p.flops_per_token = 6.0 * static_cast<double>(n);
    spec_.points.push_back(std::move(p));
    return spec_.points.back();
  }
  // Records the grid (call once, after the adds).
  store::Store& record() {
    store_ = store::Store::open(spec_.store, store::Store::Mode::read_write);
    store_->record_grid(fp4::sweeps::grid_record(spec_));
    return *store_;
  }
  // Train and eval losses for every step (loss(step) from `f`), then the outcome.
  void train(const sweeps::GridPoint& p, const std::function<double(int64_t)>& loss, store::RunState state,
             const std::string& error = "") {
    const int64_t steps = p.config["train"]["steps"].get<int64_t>();
    const int64_t batch = p.config["train"]["batch_tokens"].get<int64_t>();
    store::MetricsBatch b;
    for (int64_t s = 1; s <= steps; ++s) {
      const double v = loss(s);
      b.metrics.push_back({"train/loss", s, s * batch, v, !std::isfinite(v)});
      b.metrics.push_back({"eval/loss", s, s * batch, v + 0.01, !std::isfinite(v)});
    }
    store_->ingest(p.id, b, 0);
    store_->set_state(p.id, state, error);
  }
  store::Store& store() { return *store_; }
  const sweeps::SweepSpec& spec() const { return spec_; }
  std::filesystem::path store_path() const { return spec_.store; }
  // Closes the store (the report opens it read-only itself).
  void close() { store_.reset(); }

 private:
  std::filesystem::path dir_;
  sweeps::SweepSpec spec_;
  std::unique_ptr<store::Store> store_;
};

// `fp4lab report ARGS` (already shell-quoted), run in `dir`.
inline CliRun run_report(const std::string& args, const std::filesystem::path& dir) {
  return run_fp4lab("report " + args, dir);
}

// The CSV files docs/report.md's "The data files" table documents.
inline std::set<std::string> documented_csv_files() {
  const std::string doc = slurp(std::filesystem::path(FP4LAB_SOURCE_DIR) / "docs/report.md");
  const size_t from = doc.find("## The data files"), to = doc.find("\n## ", from + 1);
  std::set<std::string> out;
  if (from == std::string::npos) return out;
  const std::string table = doc.substr(from, to == std::string::npos ? std::string::npos : to - from);
  for (size_t at = table.find("\n| `"); at != std::string::npos; at = table.find("\n| `", at + 1)) {
    const size_t cell_end = table.find(" |", at + 3);
    const std::string cell = table.substr(at + 3, cell_end - at - 3);  // "`a.csv`, `b.csv`"
    for (size_t q = cell.find('`'); q != std::string::npos; q = cell.find('`', cell.find('`', q + 1) + 1)) {
      const size_t e = cell.find('`', q + 1);
      if (e == std::string::npos) break;
      out.insert(cell.substr(q + 1, e - q - 1));
    }
  }
  return out;
}
// Every CSV file a report wrote into `out` is documented in docs/report.md.
inline std::vector<std::string> undocumented_csv_files(const std::filesystem::path& out) {
  const std::set<std::string> documented = documented_csv_files();
  std::vector<std::string> missing;
  for (const auto& e : std::filesystem::directory_iterator(out))
    if (e.path().extension() == ".csv" && !documented.count(e.path().filename().string()))
      missing.push_back(e.path().filename().string());
  return missing;
}

// ---- XML and HTML -------------------------------------------------------------------------------

// Whether `text` is well-formed XML; the parser's first complaint in `error` if not. No network,
// no entity expansion from outside.
inline bool xml_well_formed(const std::string& text, std::string* error) {
  xmlResetLastError();
  xmlDocPtr doc = xmlReadMemory(text.data(), static_cast<int>(text.size()), "figure.svg", nullptr,
                                XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (doc == nullptr) {
    const xmlError* e = xmlGetLastError();
    if (error) *error = e && e->message ? fmt::format("line {}: {}", e->line, e->message) : "unparseable";
    return false;
  }
  const bool svg_root = xmlDocGetRootElement(doc) != nullptr &&
                        std::string(reinterpret_cast<const char*>(xmlDocGetRootElement(doc)->name)) == "svg";
  xmlFreeDoc(doc);
  if (!svg_root && error) *error = "the root element is not <svg>";
  return svg_root;
}

// An HTML document as libxml2's HTML parser sees it (it knows HTML 4, so <svg>, <figure> and
// <section> are kept as unknown elements, which is all the tests need).
class HtmlDom {
 public:
  explicit HtmlDom(const std::string& html) {
    doc_ = htmlReadMemory(html.data(), static_cast<int>(html.size()), "report.html", "utf-8",
                          HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NOIMPLIED);
    if (doc_ == nullptr) throw std::runtime_error("libxml2 could not parse the HTML at all");
  }
  ~HtmlDom() { xmlFreeDoc(doc_); }
  HtmlDom(const HtmlDom&) = delete;
  HtmlDom& operator=(const HtmlDom&) = delete;

  // Every element, in document order.
  std::vector<xmlNodePtr> elements() const {
    std::vector<xmlNodePtr> out;
    walk(xmlDocGetRootElement(doc_), out);
    return out;
  }
  std::vector<xmlNodePtr> elements(const std::string& name) const {
    std::vector<xmlNodePtr> out;
    for (xmlNodePtr n : elements())
      if (element_name(n) == name) out.push_back(n);
    return out;
  }
  static std::string element_name(xmlNodePtr n) { return n->name ? reinterpret_cast<const char*>(n->name) : ""; }
  static std::string text_of(xmlNodePtr n) {
    xmlChar* t = xmlNodeGetContent(n);
    std::string s = t ? reinterpret_cast<const char*>(t) : "";
    xmlFree(t);
    return s;
  }
  // Every attribute of an element: name → value.
  static std::map<std::string, std::string> attributes(xmlNodePtr n) {
    std::map<std::string, std::string> out;
    for (xmlAttrPtr a = n->properties; a != nullptr; a = a->next) {
      xmlChar* v = xmlNodeListGetString(n->doc, a->children, 1);
      out[reinterpret_cast<const char*>(a->name)] = v ? reinterpret_cast<const char*>(v) : "";
      xmlFree(v);
    }
    return out;
  }
  // The text of the whole document.
  std::string text() const { return text_of(xmlDocGetRootElement(doc_)); }

  struct TableData {
    std::string caption, id;
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
  };
  std::vector<TableData> tables() const {
    std::vector<TableData> out;
    for (xmlNodePtr t : elements("table")) {
      TableData d;
      d.id = attributes(t)["id"];
      std::vector<xmlNodePtr> inside;
      walk(t->children, inside);
      for (xmlNodePtr n : inside) {
        const std::string name = element_name(n);
        if (name == "caption") d.caption = text_of(n);
        else if (name == "th") d.header.push_back(text_of(n));
        else if (name == "tr" && n->parent && element_name(n->parent) == "tbody") {
          std::vector<std::string> row;
          for (xmlNodePtr c = n->children; c != nullptr; c = c->next)
            if (c->type == XML_ELEMENT_NODE && element_name(c) == "td") row.push_back(text_of(c));
          d.rows.push_back(std::move(row));
        }
      }
      out.push_back(std::move(d));
    }
    return out;
  }

 private:
  static void walk(xmlNodePtr n, std::vector<xmlNodePtr>& out) {
    for (; n != nullptr; n = n->next) {
      if (n->type == XML_ELEMENT_NODE) out.push_back(n);
      walk(n->children, out);
    }
  }
  xmlDocPtr doc_ = nullptr;
};

// The first of `tables` whose caption starts with `prefix`; null when there is none.
inline const HtmlDom::TableData* table_with_caption(const std::vector<HtmlDom::TableData>& tables,
                                                    const std::string& prefix) {
  for (const auto& t : tables)
    if (t.caption.rfind(prefix, 0) == 0) return &t;
  return nullptr;
}

// The <svg>...</svg> elements of an HTML text, as text (each must be well-formed XML on its own).
inline std::vector<std::string> inline_svgs(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const size_t end = html.find("</svg>", at);
    if (end == std::string::npos) break;
    out.push_back(html.substr(at, end + 6 - at));
    at = end;
  }
  return out;
}

// A CSV file's rows (RFC 4180: quoted fields, doubled quotes, line breaks inside quotes).
inline std::vector<std::vector<std::string>> read_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        rows.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        rows.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      rows.back().back() += c;
    }
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

// ---- Axes ---------------------------------------------------------------------------------------

// A tick label gnuplot drew (the report's tick labels are grey, rgb(68,68,68)): where, how it is
// anchored ("middle": an x axis, "end": a y axis), its text and the number it says ("20M" is 2e7,
// "+0.5%" is 0.5; NaN when it is not a number).
struct TickLabel {
  double x = 0, y = 0, value = std::nan("");
  std::string anchor, text;
};
inline double tick_value(std::string t) {
  for (size_t at; (at = t.find("\xe2\x88\x92")) != std::string::npos;) t.replace(at, 3, "-");  // U+2212
  double scale = 1;
  if (!t.empty() && t.back() == '%') t.pop_back();
  if (!t.empty()) {
    const char s = t.back();
    scale = s == 'k' ? 1e3 : s == 'M' ? 1e6 : s == 'B' ? 1e9 : s == 'T' ? 1e12 : 1;
    if (scale != 1) t.pop_back();
  }
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  return !t.empty() && end == t.c_str() + t.size() ? v * scale : std::nan("");
}
inline std::vector<TickLabel> svg_tick_labels(const std::string& svg) {
  std::vector<TickLabel> out;
  const std::string open = "<g transform=\"translate(";
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t head_end = svg.find('>', at);
    if (head_end == std::string::npos) break;
    const std::string head = svg.substr(at, head_end - at);
    if (head.find("fill=\"rgb(68,68,68)\"") == std::string::npos || head.find("rotate") != std::string::npos) continue;
    TickLabel t;
    if (std::sscanf(head.c_str() + open.size(), "%lf,%lf", &t.x, &t.y) != 2) continue;
    const size_t a = head.find("text-anchor=\"");
    if (a == std::string::npos) continue;
    t.anchor = head.substr(a + 13, head.find('"', a + 13) - a - 13);
    const size_t text_at = svg.find("<text>", head_end), text_end = svg.find("</text>", head_end);
    if (text_at == std::string::npos || text_end == std::string::npos || text_end < text_at) continue;
    t.text = svg.substr(text_at + 6, text_end - text_at - 6);
    t.value = tick_value(t.text);
    if (!t.text.empty() && !std::isnan(t.value)) out.push_back(t);
  }
  return out;
}
// The figure's axes as gnuplot drew them: each axis is the run of labelled ticks along one line
// (x axes: a common y, values rising to the right; y axes: a common x, values rising upwards),
// as (position along the axis, value) pairs. Panels side by side or stacked give one axis each.
inline std::vector<std::vector<std::pair<double, double>>> svg_axes(const std::string& svg, bool x_axes) {
  std::map<long, std::vector<std::pair<double, double>>> lines;  // the common coordinate (0.01 px) → ticks
  for (const TickLabel& t : svg_tick_labels(svg))
    if (t.anchor == (x_axes ? "middle" : "end"))
      lines[std::lround(100 * (x_axes ? t.y : t.x))].push_back({x_axes ? t.x : -t.y, t.value});
  std::vector<std::vector<std::pair<double, double>>> axes;
  for (auto& [line, ticks] : lines) {
    std::sort(ticks.begin(), ticks.end());
    axes.emplace_back();
    for (const auto& tick : ticks) {
      if (!axes.back().empty() && tick.second <= axes.back().back().second) axes.emplace_back();  // the next panel
      axes.back().push_back(tick);
    }
  }
  return axes;
}
// The largest distance (px) of an axis's ticks from the straight line through its first and last
// tick, with positions against log10(value) (`log`) or against the value: about 0 for the scale
// gnuplot drew, pixels for the other. NaN when the axis has fewer than 3 ticks (or, on log, one ≤ 0).
inline double axis_misfit(const std::vector<std::pair<double, double>>& ticks, bool log) {
  if (ticks.size() < 3) return std::nan("");
  auto coord = [&](double v) { return log ? std::log10(v) : v; };
  for (const auto& t : ticks)
    if (log && !(t.second > 0)) return std::nan("");
  const auto& a = ticks.front();
  const auto& b = ticks.back();
  const double slope = (b.first - a.first) / (coord(b.second) - coord(a.second));
  double worst = 0;
  for (const auto& t : ticks) worst = std::max(worst, std::fabs(a.first + slope * (coord(t.second) - coord(a.second)) - t.first));
  return worst;
}

// ---- PNG ----------------------------------------------------------------------------------------

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 bytes per pixel, row-major
  const uint8_t* at(int x, int y) const { return &rgb[3 * (static_cast<size_t>(y) * width + x)]; }
};
inline Image read_png(const std::filesystem::path& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str()))
    throw std::runtime_error("cannot read " + path.string() + ": " + img.message);
  img.format = PNG_FORMAT_RGB;
  Image out;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr))
    throw std::runtime_error("cannot decode " + path.string() + ": " + img.message);
  return out;
}

}  // namespace fp4::test
