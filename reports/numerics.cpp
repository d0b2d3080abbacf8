// numerics.cpp — see numerics.h.
#include "reports/numerics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace fp4::reports {

namespace {

const char* kMeaning =
    "the same config ends in other bits under another identity (docs/train.md \"Numerics identity\"), so that "
    "difference is in the comparison too. Rerun the older runs with a build of the newer identity to compare like "
    "with like.";

}  // namespace

std::string numerics_text(const StudyRun& r) {
  return r.record.numerics ? std::to_string(*r.record.numerics) : "not known";
}

std::optional<Note> numerics_span_note(const std::vector<const StudyRun*>& runs, const std::string& what) {
  std::map<int, int> counts;
  for (const StudyRun* r : runs)
    if (r->record.numerics) ++counts[*r->record.numerics];
  if (counts.size() < 2) return std::nullopt;
  std::vector<std::string> parts;
  for (const auto& [identity, n] : counts) parts.push_back(fmt::format("identity {}: {} run{}", identity, n, n == 1 ? "" : "s"));
  return Note{{strong("Numerics mixed: "),
               text(fmt::format("the runs of {} trained under {} numerics identities ({}); {}", what, counts.size(),
                                fmt::join(parts, ", "), kMeaning))}};
}

std::optional<Note> numerics_pairs_note(const std::vector<std::pair<const StudyRun*, const StudyRun*>>& pairs,
                                        const std::string& what) {
  int mixed = 0;
  std::string example;
  for (const auto& [a, b] : pairs)
    if (a->record.numerics && b->record.numerics && *a->record.numerics != *b->record.numerics) {
      if (mixed++ == 0)
        example = fmt::format("{} (identity {}) against {} (identity {})", a->record.name, *a->record.numerics,
                              b->record.name, *b->record.numerics);
    }
  if (mixed == 0) return std::nullopt;
  return Note{{strong("Numerics mixed: "),
               text(fmt::format("{} of the {} {} compare runs trained under two numerics identities (e.g. {}); {}", mixed,
                                pairs.size(), what, example, kMeaning))}};
}

}  // namespace fp4::reports
