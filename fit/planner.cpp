// planner.cpp — see planner.h.
#include "fit/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "base/csv_table.h"
#include "base/format.h"
#include "base/parse_number.h"
#include "base/user_error.h"
#include "fit/contrasts.h"
#include "fit/paired.h"
#include "store/grid_record.h"
#include "store/store.h"

namespace fp4::fit {

namespace {

// The p-quantile of the standard normal, by bisection on its upper tail ½·erfc(z/√2).
double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("normal_quantile: p must lie in (0, 1)");
  if (p < 0.5) return -normal_quantile(1 - p);
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > 1 - p) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

// Student's t quantile for any 0 < p < 1 (the symmetric half below the median).
double t_quantile_any(double p, double df) {
  if (p == 0.5) return 0;
  return p > 0.5 ? student_t_quantile(p, df) : -student_t_quantile(1 - p, df);
}

void check_design(double sd, double effect, double alpha, double power) {
  if (!(effect > 0)) throw std::invalid_argument("seeds_needed: the effect must be > 0");
  if (!(sd >= 0)) throw std::invalid_argument("seeds_needed: sd must be >= 0");
  if (!(alpha > 0 && alpha < 1) || !(power > 0 && power < 1))
    throw std::invalid_argument("seeds_needed: alpha and power must lie in (0, 1)");
}

}  // namespace

double seeds_needed_normal(double sd, double effect, double alpha, double power) {
  check_design(sd, effect, alpha, power);
  const double z = normal_quantile(1 - alpha / 2) + normal_quantile(power);
  return (z * sd / effect) * (z * sd / effect);
}

int64_t seeds_needed(double sd, double effect, double alpha, double power, int64_t cap) {
  check_design(sd, effect, alpha, power);
  for (int64_t n = 2; n <= cap; ++n) {
    const double df = static_cast<double>(n - 1);
    const double t = t_quantile_any(1 - alpha / 2, df) + t_quantile_any(power, df);
    if ((t * sd / effect) * (t * sd / effect) <= static_cast<double>(n)) return n;
  }
  return cap + 1;
}

int64_t interim_seeds(double sd, double target_se, int64_t floor, int64_t cap) {
  if (!(target_se > 0) || floor > cap) throw std::invalid_argument("interim_seeds: needs target_se > 0 and floor <= cap");
  // ceil with a hair of slack, as interim.py, so that an exact square is not pushed up by rounding.
  const int64_t need = static_cast<int64_t>(std::ceil((sd / target_se) * (sd / target_se) - 1e-9));
  return std::min(cap, std::max(floor, need));
}

namespace {

// The store's attempts, each succeeded run's last ended attempt carrying the run's mean
// train/tokens_per_s.
std::vector<MeasuredAttempt> measured_attempts(const store::Store& store) {
  std::vector<MeasuredAttempt> out;
  for (const store::RunRecord& r : store.runs()) {
    double sum = 0;
    int64_t n = 0;
    if (r.state == store::RunState::succeeded)
      for (const store::MetricRow& m : store.metrics(r.id, "train/tokens_per_s"))
        if (!m.is_nan && m.value > 0) sum += m.value, ++n;
    const std::vector<store::Store::AttemptRecord> attempts = store.attempts(r.id);
    size_t trained = attempts.size();  // the attempt that finished the run: its last ended one
    for (size_t i = 0; i < attempts.size(); ++i)
      if (attempts[i].end > 0 && (trained == attempts.size() || attempts[i].start > attempts[trained].start)) trained = i;
    for (size_t i = 0; i < attempts.size(); ++i) {
      const store::Store::AttemptRecord& a = attempts[i];
      out.push_back({r.model, r.recipe, a.provenance.host, a.provenance.devices, a.start, a.end,
                     i == trained && n > 0 ? sum / static_cast<double>(n) : kNaN});
    }
  }
  return out;
}

// How many GPUs a devices string names: "cuda:0,1" two; anything else one device.
double devices_used(const std::string& devices) {
  if (devices.rfind("cuda:", 0) != 0) return 1;
  return static_cast<double>(1 + std::count(devices.begin(), devices.end(), ','));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

// A store to read, or null when there is none yet. An older schema is migrated first (what
// `fp4lab fit` does too: the migration adds tables and changes no row).
std::unique_ptr<store::Store> open_if_there(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return nullptr;
  return store::Store::open(path, store::Store::Mode::read_migrating);
}

}  // namespace

std::vector<BenchRate> read_bench_rates(const std::filesystem::path& path) {
  std::vector<BenchRate> rates;
  const std::vector<std::string> columns = {"size", "recipe", "tokens_per_s", "runs_per_device", "device", "source"};
  for (const CsvRow& row : read_csv_table(path, columns, "rates file")) {
    const std::string where = fmt::format("{}:{}", path.string(), row.line);
    for (size_t k = 0; k < columns.size(); ++k)
      if (row.cells[k].empty()) throw UserError(fmt::format("{}: column {}: empty", where, columns[k]));
    BenchRate r;
    r.size = row.cells[0];
    r.recipe = row.cells[1];
    r.device = row.cells[4];
    r.source = row.cells[5];
    const std::string& tps = row.cells[2];
    errno = 0;
    char* end = nullptr;
    r.tokens_per_s = std::strtod(tps.c_str(), &end);
    if (end != tps.c_str() + tps.size() || errno == ERANGE || !std::isfinite(r.tokens_per_s) || !(r.tokens_per_s > 0))
      throw UserError(fmt::format("{}: column tokens_per_s: \"{}\" is not a number > 0", where, tps));
    const std::string& packing = row.cells[3];
    const std::optional<int64_t> k = parse_integer<int64_t>(packing);
    if (!k || *k < 1)
      throw UserError(fmt::format("{}: column runs_per_device: \"{}\" is not a whole number >= 1", where, packing));
    r.runs_per_device = *k;
    r.line = row.line;
    // One figure per size, recipe and packing: two would leave the plan to pick one silently.
    for (const BenchRate& o : rates)
      if (o.size == r.size && o.recipe == r.recipe && o.runs_per_device == r.runs_per_device)
        throw UserError(fmt::format("{}: {} {} at {} run(s) per device is already given at line {} (keep one)", where,
                                    r.size, r.recipe, r.runs_per_device, o.line));
    rates.push_back(std::move(r));
  }
  return rates;
}

const BenchRate* bench_rate_for(const std::vector<BenchRate>& rates, const std::string& size,
                                const std::string& recipe, int64_t runs_per_device) {
  const BenchRate* best = nullptr;
  for (const BenchRate& r : rates) {
    if (r.size != size || r.recipe != recipe) continue;
    const int64_t off = std::abs(r.runs_per_device - runs_per_device);
    const int64_t best_off = best ? std::abs(best->runs_per_device - runs_per_device) : 0;
    if (best == nullptr || off < best_off || (off == best_off && r.runs_per_device < best->runs_per_device)) best = &r;
  }
  return best;
}

std::map<std::pair<std::string, std::string>, DeviceRate> device_rates(const std::vector<MeasuredAttempt>& attempts) {
  struct Samples {
    std::vector<double> per_device, per_run, sharing;
  };
  std::map<std::pair<std::string, std::string>, Samples> per;
  for (const MeasuredAttempt& a : attempts) {
    if (!(a.tokens_per_s > 0) || !(a.end > a.start)) continue;
    // The time-weighted count of attempts on its device while it trained, itself included.
    double shared = 0;
    for (const MeasuredAttempt& b : attempts)
      if (b.host == a.host && b.devices == a.devices && b.end > b.start)
        shared += std::max(0.0, std::min(a.end, b.end) - std::max(a.start, b.start));
    const double sharing = shared / (a.end - a.start);
    Samples& s = per[{a.model, a.recipe}];
    s.per_device.push_back(a.tokens_per_s * sharing / devices_used(a.devices));
    s.per_run.push_back(a.tokens_per_s);
    s.sharing.push_back(sharing);
  }
  std::map<std::pair<std::string, std::string>, DeviceRate> out;
  for (const auto& [key, s] : per)
    out[key] = {median(s.per_device), median(s.per_run), median(s.sharing), static_cast<int64_t>(s.per_run.size())};
  return out;
}

void plan_study(const PlanCommand& c) {
  if (c.study == nullptr) throw std::logic_error("plan_study: no study");
  if (!(c.effect_pp > 0)) throw UserError(fmt::format("--effect {}: must be > 0 (percentage points)", c.effect_pp));
  if (!(c.power > 0 && c.power < 1)) throw UserError(fmt::format("--power {}: must lie in (0, 1)", c.power));
  if (!(c.alpha > 0 && c.alpha < 1)) throw UserError(fmt::format("--alpha {}: must lie in (0, 1)", c.alpha));
  const store::GridRecord& grid = c.study->main;
  std::string out = fmt::format("plan of {} ({} points; docs/statistics.md \"Planning\")\n", grid.name, grid.points.size());

  const std::filesystem::path pilot_path = c.pilot.empty() ? grid.store : c.pilot;
  if (!c.pilot.empty() && !std::filesystem::exists(c.pilot))
    throw UserError("--pilot " + c.pilot.string() + ": no such store");
  std::unique_ptr<store::Store> pilot = open_if_there(pilot_path);
  // Read before anything is printed: a malformed rates file is one line and exit 2, not half a plan.
  const std::vector<BenchRate> bench = c.rates.empty() ? std::vector<BenchRate>{} : read_bench_rates(c.rates);

  // (a) Device time, from the study's own store; a size and recipe it has not measured yet, from a
  // pilot store's runs (--pilot), which is how a study is planned before any of its runs; one that
  // neither has measured, from a bench figure of the rates file (--rates).
  std::unique_ptr<store::Store> own = open_if_there(grid.store);
  std::map<std::string, store::RunState> state;
  std::map<std::pair<std::string, std::string>, DeviceRate> rates, pilot_rates;
  if (own) {
    for (const store::RunRecord& r : own->runs()) state[r.id] = r.state;
    rates = device_rates(measured_attempts(*own));
  }
  if (pilot && !c.pilot.empty()) pilot_rates = device_rates(measured_attempts(*pilot));
  struct Cost {
    int64_t runs = 0, tokens = 0;
  };
  std::map<std::pair<std::string, std::string>, Cost> left;
  int64_t done = 0;
  for (const store::GridPointRecord& p : grid.points) {
    const auto s = state.find(p.id);
    if (s != state.end() && s->second == store::RunState::succeeded) {
      ++done;
      continue;
    }
    Cost& k = left[{p.model, p.recipe}];
    ++k.runs;
    k.tokens += p.tokens;
  }
  out += fmt::format("device time: {} of {} runs have succeeded; the others at the speed the store measured for their "
                     "size and recipe: each succeeded run's tokens/s times the runs that shared its device while it "
                     "trained (packing), per device, the median over the runs{}:\n",
                     done, grid.points.size(),
                     c.rates.empty() ? "" : " (where no store has measured one, the rates file's figure)");
  double total = 0;
  int64_t unknown = 0;
  std::vector<std::string> packed_otherwise;
  int64_t from_pilot = 0, from_bench = 0;
  std::vector<std::string> bench_sources;  // "device: source" of the bench rows used, once each
  for (const auto& [key, k] : left) {
    const DeviceRate* measured = nullptr;
    DeviceRate bench_rate;
    std::string origin;
    // A store's measurement first, the study's then the pilot's: it is this engine on this
    // machine at the study's own shape; a bench figure only where neither store has one.
    if (const auto own_rate = rates.find(key); own_rate != rates.end()) {
      measured = &own_rate->second;
    } else if (const auto p = pilot_rates.find(key); p != pilot_rates.end()) {
      measured = &p->second;
      origin = " (the pilot's speed)";
      from_pilot += k.runs;
    } else if (const BenchRate* b = bench_rate_for(bench, key.first, key.second, c.runs_per_device)) {
      // The file's tokens/s is the device's, summed over the runs that shared it.
      const double packed = static_cast<double>(b->runs_per_device);
      bench_rate = {b->tokens_per_s, b->tokens_per_s / packed, packed, 0};
      measured = &bench_rate;
      origin = fmt::format(" (bench figure, {}:{})", c.rates.filename().string(), b->line);
      from_bench += k.runs;
      const std::string source = b->device + ": " + b->source;
      if (std::find(bench_sources.begin(), bench_sources.end(), source) == bench_sources.end())
        bench_sources.push_back(source);
    }
    if (measured == nullptr) {
      unknown += k.runs;
      out += fmt::format("  {:<8} {:<22} {:>4} runs  {:>8} tokens  unknown: no succeeded run of this size and recipe "
                         "measured its speed (--pilot STORE reads another study's, --rates FILE a bench's figures: "
                         "bench/train-rates.csv){}\n",
                         key.first, key.second, k.runs, fmt::format("{:.3g}", static_cast<double>(k.tokens)),
                         bench.empty() ? "" : fmt::format("; {} has no row for it", c.rates.string()));
      continue;
    }
    const DeviceRate& r = *measured;
    const double seconds = static_cast<double>(k.tokens) / r.tokens_per_device_s;
    total += seconds;
    out += fmt::format("  {:<8} {:<22} {:>4} runs  {:>8} tokens  at {} a run, {:.1f} runs per device: {} a device: {}{}\n",
                       key.first, key.second, k.runs, fmt::format("{:.3g}", static_cast<double>(k.tokens)),
                       format_rate(r.tokens_per_s), r.sharing, format_rate(r.tokens_per_device_s),
                       format_duration(seconds), origin);
    if (std::fabs(r.sharing - c.runs_per_device) >= 0.5) packed_otherwise.push_back(key.first + " " + key.second);
  }
  out += fmt::format("  total: {} of device time (divide by the devices it runs on for the wall time){}\n",
                     format_duration(total),
                     unknown > 0 ? fmt::format(", plus {} run(s) of unknown speed", unknown) : "");
  if (from_pilot > 0)
    out += fmt::format("  note: {} run(s) at the speed the pilot's runs of the same size and recipe measured ({}); a "
                       "batch, sequence length or GPU other than theirs trains at another speed\n",
                       from_pilot, pilot_path.string());
  if (from_bench > 0)
    out += fmt::format("  note: {} run(s) at bench figures from {} ({}), not measured by any store; a bench measures "
                       "one shape: a batch, sequence length, data or GPU other than its own trains at another speed\n",
                       from_bench, c.rates.string(), fmt::join(bench_sources, "; "));
  if (!packed_otherwise.empty())
    out += fmt::format("  note: this grid packs {} run{} per device ([executor] runs_per_gpu, or cpu_jobs on the CPU), "
                       "but {} {} measured at another packing: the estimate assumes a device trains as many tokens "
                       "per second at either\n",
                       c.runs_per_device, c.runs_per_device == 1 ? "" : "s", fmt::join(packed_otherwise, ", "),
                       packed_otherwise.size() == 1 ? "was" : "were");

  // (b) Seeds per contrast, from the pilot's paired seeds.
  const double target_se = c.effect_pp / (normal_quantile(1 - c.alpha / 2) + normal_quantile(c.power));
  out += fmt::format("seeds per contrast: effect {:g} pp, power {:g}%, two-sided alpha {:g} (before any multiplicity "
                     "adjustment), from the sd of d over the pilot's paired seeds ({}):\n",
                     c.effect_pp, 100 * c.power, c.alpha, pilot_path.string());
  if (!pilot) {
    out += "  no pilot store yet: run a few seeds of each contrast first (--pilot names another store)\n";
  } else {
    const std::vector<ContrastRun> runs = load_contrast_runs(*pilot);
    std::vector<std::string> main_recipes;
    for (const store::GridPointRecord& p : grid.points)
      if (std::find(main_recipes.begin(), main_recipes.end(), p.recipe) == main_recipes.end())
        main_recipes.push_back(p.recipe);
    std::map<std::string, std::string> bases = grid.recipe_bases;
    for (const store::GridRecord& g : c.study->others) bases.insert(g.recipe_bases.begin(), g.recipe_bases.end());
    const FamilyRequest request =
        families_asked(grid.compare, grid.file.filename().string(), main_recipes, bases, runs);
    const ContrastSet set = compute_contrasts(runs, request, grid.name);
    out += "  families: " + set.source + "\n";
    out += fmt::format("    {:<28} {:<44} {:>6} {:>9} {:>7} {:>9}\n", "A - B", "pilot grid point", "seeds", "sd d (pp)",
                       "needed", "normal n");
    int64_t rows = 0;
    for (const ContrastFamily& f : set.families)
      for (const ContrastTest& t : f.tests) {
        if (t.metric != "final_eval") continue;
        ++rows;
        const int64_t n = seeds_needed(t.t.sd, c.effect_pp, c.alpha, c.power);
        out += fmt::format("    {:<28} {:<44} {:>6} {:>9.3f} {:>7} {:>9.1f}\n", t.recipe + " - " + t.against, t.point,
                           t.t.n, t.t.sd, n, seeds_needed_normal(t.t.sd, c.effect_pp, c.alpha, c.power));
      }
    if (rows == 0) out += "    no contrast has two paired seeds at any point of the pilot: nothing to estimate sd from\n";
    out += fmt::format(
        "  interim rule (variance only): after the first k seeds of a contrast (k at least 8), compute the sd of d "
        "over them and continue to n = min(cap, max(planned n, ceil((sd / {:.3f} pp)²))), the standard error that "
        "gives this power; never look at the mean of d before n is fixed, and fix the cap (e.g. twice the planned n) "
        "in advance\n",
        target_se);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace fp4::fit
