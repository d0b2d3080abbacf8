// metrics_jsonl.h — a run directory's metrics.jsonl (docs/train.md) read into the rows the store
// keeps (store/store.h MetricsBatch).
#pragma once

#include <string>
#include <string_view>

#include "store/store.h"

namespace fp4::sweeps {

// Parses complete lines of metrics.jsonl text. A malformed complete line throws std::runtime_error
// naming `source` and the line number; a trailing line without '\n' is left for later
// (consumed_bytes stops before it).
store::MetricsBatch parse_metrics_jsonl(std::string_view text, const std::string& source);

}  // namespace fp4::sweeps
