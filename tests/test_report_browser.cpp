// test_report_browser.cpp — report.html in a real browser: headless Chromium (Debian's chromium)
// with the network disabled loads the report of a tiny real study, and the test checks from the
// browser's DOM, a full-page screenshot and Chromium's own network log that every figure rendered
// (a non-blank region with the recipes' colours where each SVG is laid out) and that no request
// left the file. The test skips itself (exit 77, "skipped" in ctest) only when Chromium cannot
// start, and says why.
#include <catch2/catch.hpp>

#include <fmt/ranges.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/child_process.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;

namespace {

// Where Debian puts it, else the first `chromium` on PATH.
std::string chromium_path() {
  if (::access("/usr/bin/chromium", X_OK) == 0) return "/usr/bin/chromium";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/chromium";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

struct BrowserRun {
  int exit_code = -1;
  std::string out;   // stdout and stderr together
};

// One headless Chromium: a fresh profile, no sandbox (root in CI), no GPU, none of the background
// services that phone home, and no network at all: every host name fails to resolve and every
// http(s) request goes to a proxy on a closed port. `extra` adds --dump-dom, --screenshot, ...
BrowserRun run_chromium(const std::string& chromium, const fs::path& work, const std::vector<std::string>& extra,
                        const std::string& url) {
  static int n = 0;
  const fs::path profile = work / ("profile-" + std::to_string(n));
  const fs::path log = work / ("chromium-" + std::to_string(n++) + ".log");
  fs::create_directories(profile);
  fp4::SpawnRequest r;
  r.argv = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--disable-default-apps", "--no-default-browser-check", "--no-pings",
            "--hide-scrollbars", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--user-data-dir=" + profile.string()};
  r.argv.insert(r.argv.end(), extra.begin(), extra.end());
  r.argv.push_back(url);
  r.output = log;
  r.env = {{"HOME", work.string()}};
  const pid_t pid = fp4::spawn(r);
  // A hung browser must not hang the test: 120 s, then it is killed (with its process group).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  BrowserRun out;
  while (true) {
    if (auto status = fp4::poll_child(pid)) {
      out.exit_code = status->shell_code();
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      out.exit_code = fp4::wait_child(pid).shell_code();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.out = fp4::test::slurp(log);
  return out;
}

// The part of Chromium's output that is the DOM (--dump-dom prints it to stdout, logs go to stderr
// and share the file).
std::string dom_of(const std::string& output) {
  const size_t begin = output.find("<html");
  const size_t end = output.rfind("</html>");
  if (begin == std::string::npos || end == std::string::npos) return "";
  return output.substr(begin, end + 7 - begin);
}

// Requests the page made, from Chromium's net log: URL requests whose initiator is a document (the
// browser's own background requests have none: "not an origin") or whose network isolation key is
// the file's. Returns their URLs; `all` gets every URL request's URL, for the message.
std::vector<std::string> page_requests(const fs::path& netlog, std::vector<std::string>* all) {
  const nlohmann::json log = nlohmann::json::parse(fp4::test::slurp(netlog));
  const int start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].get<int>();
  std::vector<std::string> page;
  for (const auto& e : log["events"]) {
    if (e.value("type", -1) != start_job || !e.contains("params")) continue;
    const auto& p = e["params"];
    const std::string url = p.value("url", "");
    all->push_back(url);
    const std::string initiator = p.value("initiator", "not an origin");
    const std::string nik = p.value("network_isolation_key", "");
    if (initiator != "not an origin" || nik.find("file://") != std::string::npos) page.push_back(url);
  }
  return page;
}

// Pixels of a region that are not the page's white, and those of a saturated colour (a recipe's
// line: max - min channel > 60; greys and black have none).
struct Ink {
  double not_white = 0, coloured = 0;
};
Ink ink(const fp4::test::Image& img, int x0, int y0, int w, int h) {
  int64_t total = 0, dark = 0, colour = 0;
  for (int y = std::max(0, y0); y < std::min(img.height, y0 + h); ++y)
    for (int x = std::max(0, x0); x < std::min(img.width, x0 + w); ++x) {
      const uint8_t* p = img.at(x, y);
      const int lo = std::min({p[0], p[1], p[2]}), hi = std::max({p[0], p[1], p[2]});
      ++total;
      if (lo < 235) ++dark;
      if (hi - lo > 60) ++colour;
    }
  return total == 0 ? Ink{} : Ink{static_cast<double>(dark) / total, static_cast<double>(colour) / total};
}

// Lays the figures out in a copy of the page with a measuring script (the report itself has none):
// each figure's SVG box in page coordinates, and the page's height.
const char* kMeasure =
    "<script>document.querySelectorAll('figure').forEach(f => {"
    " const r = f.querySelector('svg').getBoundingClientRect();"
    " f.setAttribute('data-rect', [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round).join(','));"
    "}); document.body.setAttribute('data-height', document.documentElement.scrollHeight);</script>";

}  // namespace

TEST_CASE("report in a real browser: every figure renders and no request leaves the file", "[report][report_browser]") {
  const std::string chromium = chromium_path();
  ScratchDir probe_dir;
  const BrowserRun probe = chromium.empty() ? BrowserRun{}
                                            : run_chromium(chromium, probe_dir.path(), {"--dump-dom"}, "about:blank");
  if (chromium.empty() || probe.exit_code != 0 || dom_of(probe.out).empty()) {
    std::printf("SKIPPED: Chromium cannot start (%s): %s\n",
                chromium.empty() ? "no /usr/bin/chromium or chromium on PATH; scripts/setup-deps.sh --with-test-tools installs it"
                                 : ("exit " + std::to_string(probe.exit_code)).c_str(),
                probe.out.substr(0, 400).c_str());
    std::fflush(stdout);
    std::error_code ec;
    fs::remove_all(probe_dir.path(), ec);  // _Exit runs no destructors
    std::_Exit(77);
  }

  ScratchDir dir;
  const fp4::test::TinyStudy study = fp4::test::make_tiny_study(dir.path());
  const fp4::test::CliRun r = fp4::test::run_report("'" + study.toml.string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path report = dir / "tiny-report" / "report.html";
  const std::string html = fp4::test::slurp(report);
  const size_t figures = fp4::test::inline_svgs(html).size();
  REQUIRE(figures == 7);  // loss curves, gap over training, loss vs N and vs C, noise floor, probe alpha and eta

  // 1. The browser's DOM of the report: every figure is an SVG element with its drawing, no script.
  const BrowserRun dom_run = run_chromium(chromium, dir.path(), {"--dump-dom"}, "file://" + report.string());
  INFO(dom_run.out.substr(0, 2000));
  REQUIRE(dom_run.exit_code == 0);
  HtmlDom dom(dom_of(dom_run.out));
  CHECK(dom.elements("figure").size() == figures);
  CHECK(dom.elements("svg").size() == figures);
  CHECK(dom.elements("script").empty());
  CHECK(dom.elements("path").size() > 40 * figures);

  // 2. Where each figure is laid out (a measuring copy beside the report, same CSS and width).
  std::string measured = html;
  const size_t csp = measured.find("<meta http-equiv=\"Content-Security-Policy\"");
  REQUIRE(csp != std::string::npos);
  measured.erase(csp, measured.find('>', csp) + 1 - csp);  // the policy forbids the measuring script
  measured.insert(measured.rfind("</body>"), kMeasure);
  const fs::path measure_file = report.parent_path() / "measure.html";
  fp4::test::spit(measure_file, measured);
  const int width = 1200;
  const BrowserRun layout = run_chromium(chromium, dir.path(), {"--dump-dom", "--window-size=1200,900"},
                                         "file://" + measure_file.string());
  REQUIRE(layout.exit_code == 0);
  HtmlDom laid(dom_of(layout.out));
  std::vector<std::array<int, 4>> boxes;
  for (xmlNodePtr f : laid.elements("figure")) {
    const std::string rect = HtmlDom::attributes(f)["data-rect"];
    std::array<int, 4> b{};
    REQUIRE(std::sscanf(rect.c_str(), "%d,%d,%d,%d", &b[0], &b[1], &b[2], &b[3]) == 4);
    boxes.push_back(b);
  }
  REQUIRE(boxes.size() == figures);
  const auto bodies = laid.elements("body");
  REQUIRE(bodies.size() == 1);
  const int height = std::atoi(HtmlDom::attributes(bodies[0])["data-height"].c_str());
  REQUIRE(height > 1000);
  REQUIRE(height < 30000);

  // 3. The report itself (with its policy), the whole page in one screenshot, the network logged.
  const fs::path shot = dir / "report.png", netlog = dir / "netlog.json";
  const BrowserRun screen = run_chromium(
      chromium, dir.path(),
      {"--screenshot=" + shot.string(), fmt::format("--window-size={},{}", width, height), "--log-net-log=" + netlog.string()},
      "file://" + report.string());
  INFO(screen.out.substr(0, 2000));
  REQUIRE(screen.exit_code == 0);
  const fp4::test::Image img = fp4::test::read_png(shot);
  REQUIRE(img.width == width);
  REQUIRE(img.height == height);
  for (size_t i = 0; i < boxes.size(); ++i) {
    const auto& b = boxes[i];
    INFO("figure " << i << " at " << b[0] << "," << b[1] << " size " << b[2] << "x" << b[3]);
    CHECK(b[2] > 300);
    CHECK(b[3] > 200);
    CHECK(b[0] + b[2] <= width);
    const Ink in = ink(img, b[0], b[1], b[2], b[3]);
    INFO("not white " << in.not_white << ", coloured " << in.coloured);
    CHECK(in.not_white > 0.01);   // axes, text and lines were drawn
    CHECK(in.coloured > 0.0005);  // the recipes' colours are there
  }
  // The margin left of the figures is blank: the check above can tell drawn from empty.
  const Ink margin = ink(img, 0, boxes[0][1], std::max(1, boxes[0][0] - 20), boxes[0][3]);
  CHECK(margin.not_white < 0.001);

  std::vector<std::string> all;
  const auto leaked = page_requests(netlog, &all);
  INFO("every URL request in the net log: " << fmt::format("{}", fmt::join(all, " ")));
  CHECK(leaked.empty());

  // 4. Printed (Chromium applies the print styles): a PDF of several pages, the figures in it as
  // vector drawings (an SVG prints as paths, not as an image).
  const fs::path pdf = dir / "report.pdf";
  const BrowserRun print = run_chromium(chromium, dir.path(), {"--print-to-pdf=" + pdf.string(), "--no-pdf-header-footer"},
                                        "file://" + report.string());
  INFO(print.out.substr(0, 2000));
  REQUIRE(print.exit_code == 0);
  const std::string pdf_bytes = fp4::test::slurp(pdf);
  REQUIRE(pdf_bytes.rfind("%PDF-", 0) == 0);
  size_t pages = 0;
  for (size_t at = pdf_bytes.find("/Type /Page"); at != std::string::npos; at = pdf_bytes.find("/Type /Page", at + 1))
    pages += pdf_bytes.compare(at, 12, "/Type /Pages") != 0;
  INFO(pages << " pages, " << pdf_bytes.size() << " bytes");
  CHECK(pages >= static_cast<size_t>(figures) / 2);
  CHECK(pdf_bytes.find("/Subtype /Image") == std::string::npos);

  // The net log check can fail: a page with one remote image (and no policy) is caught.
  const fs::path control = dir / "control.html";
  fp4::test::spit(control, "<!DOCTYPE html><html><body><p>control</p><img src=\"http://example.invalid/x.png\"></body></html>\n");
  const fs::path control_log = dir / "control-netlog.json";
  const BrowserRun ctl = run_chromium(chromium, dir.path(), {"--dump-dom", "--log-net-log=" + control_log.string()},
                                      "file://" + control.string());
  REQUIRE(ctl.exit_code == 0);
  std::vector<std::string> ctl_all;
  const auto ctl_leaked = page_requests(control_log, &ctl_all);
  REQUIRE(ctl_leaked.size() >= 1);
  CHECK(ctl_leaked[0] == "http://example.invalid/x.png");
}
