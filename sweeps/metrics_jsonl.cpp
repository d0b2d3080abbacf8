// metrics_jsonl.cpp — see metrics_jsonl.h: metrics.jsonl text as written by
// engine/run/metrics (docs/train.md "metrics.jsonl") into the rows the store keeps.
//
// Rules, each for a reason:
//   * Only lines ending in '\n' are read: the trainer may be appending the next line right now, and
//     a line cut short by a crash is removed by the trainer before it appends again. consumed_bytes
//     stops before such a line so the next ingest reads it whole.
//   * Kinds this fp4lab does not know are skipped, so a store keeps ingesting run directories
//     written by a newer trainer; a known kind with a missing or mistyped field is an error.
//   * In train and eval rows every numeric field other than step and tokens is a metric
//     "<kind>/<field>"; null (a non-finite value) becomes is_nan; fields of other JSON types are
//     skipped for the same forward-compatibility reason.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "sweeps/metrics_jsonl.h"

namespace fp4::sweeps {

namespace {

using nlohmann::json;
using store::MetricRow;
using store::MetricsBatch;
using store::ProbeGemmRow;
using store::ProbeRow;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Thrown inside one row's parse; the caller adds the source and line number.
struct RowError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const json& field(const json& row, const char* name) {
  const auto it = row.find(name);
  if (it == row.end()) throw RowError(std::string("missing \"") + name + "\"");
  return *it;
}

int64_t integer_field(const json& row, const char* name) {
  const json& v = field(row, name);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw RowError(std::string("\"") + name + "\" is out of range");
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // A writer may spell an integer as an integral float ("step": 3.0); a fraction is not a count.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::trunc(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  throw RowError(std::string("\"") + name + "\" must be an integer, got " + v.dump());
}

std::string text_field(const json& row, const char* name) {
  const json& v = field(row, name);
  if (!v.is_string()) throw RowError(std::string("\"") + name + "\" must be a string, got " + v.dump());
  return v.get<std::string>();
}

// A measured value: a number, or null for one that was not finite (NaN here).
double value_field(const json& row, const char* name) {
  const json& v = field(row, name);
  if (v.is_null()) return kNaN;
  if (!v.is_number()) throw RowError(std::string("\"") + name + "\" must be a number or null, got " + v.dump());
  return v.get<double>();
}

// A probe row's fields (base/probe_rows.h), each read as its type says.
template <class Row>
Row probe_row(const json& row) {
  Row r;
  Row::for_each_field(r, [&](const char* name, bool, auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::string>)
      v = text_field(row, name);
    else if constexpr (std::is_same_v<V, double>)
      v = value_field(row, name);
    else
      v = static_cast<V>(integer_field(row, name));
  });
  return r;
}

// Every numeric (or null) field of a row but kind, step, tokens and layer, as the metric key
// prefix + field at the row's step.
void push_values(const json& row, const std::string& prefix, MetricsBatch& out) {
  const int64_t step = integer_field(row, "step");
  const int64_t tokens = integer_field(row, "tokens");
  for (const auto& [name, v] : row.items()) {
    if (name == "kind" || name == "step" || name == "tokens" || name == "layer") continue;
    if (!v.is_null() && !v.is_number()) continue;
    MetricRow m;
    m.key = prefix + name;
    m.step = step;
    m.tokens = tokens;
    m.is_nan = v.is_null();
    m.value = m.is_nan ? kNaN : v.get<double>();
    out.metrics.push_back(std::move(m));
  }
}

void parse_row(const json& row, MetricsBatch& out) {
  if (!row.is_object()) throw RowError("not a JSON object");
  const std::string kind = text_field(row, "kind");
  if (kind == "train" || kind == "eval") {
    push_values(row, kind + "/", out);
  } else if (kind == "moe") {
    // An MoE block's routing in a step (docs/train.md): key "moe/<layer>/<field>".
    push_values(row, "moe/" + std::to_string(integer_field(row, "layer")) + "/", out);
  } else if (kind == ProbeRow::kKind) {
    out.probes.push_back(probe_row<ProbeRow>(row));
  } else if (kind == ProbeGemmRow::kKind) {
    out.probe_gemms.push_back(probe_row<ProbeGemmRow>(row));
  } else if (kind == "run") {
    out.run_info = row;  // per process; the last one describes the current process
  }
  // Any other kind: written by a newer trainer, skipped.
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the id helps nobody here.
std::string without_exception_id(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

}  // namespace

MetricsBatch parse_metrics_jsonl(std::string_view text, const std::string& source) {
  MetricsBatch out;
  size_t line_start = 0;
  int64_t line_number = 0;
  for (;;) {
    const size_t newline = text.find('\n', line_start);
    if (newline == std::string_view::npos) break;  // an incomplete last line waits for the next ingest
    ++line_number;
    const std::string_view line = text.substr(line_start, newline - line_start);
    const size_t next = newline + 1;
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
      try {
        parse_row(json::parse(line), out);
      } catch (const RowError& e) {
        throw std::runtime_error(source + ":" + std::to_string(line_number) + ": malformed metrics row: " + e.what());
      } catch (const json::exception& e) {
        throw std::runtime_error(source + ":" + std::to_string(line_number) +
                                 ": malformed metrics row: " + without_exception_id(e.what()));
      }
    }
    line_start = next;
  }
  out.consumed_bytes = static_cast<int64_t>(line_start);
  return out;
}

}  // namespace fp4::sweeps
