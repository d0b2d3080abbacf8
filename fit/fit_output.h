// fit_output.h — `fp4lab fit`'s three output formats (docs/fit.md "Output"): a table for people,
// JSON (the stored columns, one object per fit) and CSV (one row per reported number).
#pragma once

#include <string>
#include <vector>

#include "fit/contrasts.h"
#include "fit/fitter.h"
#include "fit/stored_fit.h"

namespace fp4::fit {

enum class OutputFormat { table, json, csv };
OutputFormat parse_output_format(const std::string& name);  // throws fp4::UserError

// `notes[i]` (may be empty) is printed under fit i's heading in the table ("stored as fit 3").
// `skipped` (the fits the plan left out) ends the table as "skipped: <reason>" lines and the CSV as
// rows of kind "skipped". `contrasts` (the paired contrasts over seeds of a store; null for a
// points file) ends the table (format_contrasts_table), the CSV as rows of kind contrast*, and is
// the JSON object's "contrasts" (null without): JSON is {"fits": [...], "contrasts": ...}.
std::string format_fits(const std::vector<StoredFit>& fits, OutputFormat format,
                        const std::vector<std::string>& notes = {}, const std::vector<SkippedFit>& skipped = {},
                        const ContrastSet* contrasts = nullptr);

}  // namespace fp4::fit
