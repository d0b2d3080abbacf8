// numerics.h — the numerics identity of the runs a report compares (base/numerics_identity.h):
// every run's is in the Runs table, and a note says wherever a comparison spans two identities (a
// gap, a fit, a figure whose runs trained under different numerics holds that difference too).
#pragma once

#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "reports/document.h"
#include "reports/study.h"

namespace fp4::reports {

// "2", or "not known" (a run not started, or recorded by a binary of a commit fp4lab does not know).
std::string numerics_text(const StudyRun& r);

// A note when the runs with a known identity among `runs` span more than one: which identities,
// how many runs each, and what it means for `what` ("the scaling figures and fits"); nothing
// otherwise.
std::optional<Note> numerics_span_note(const std::vector<const StudyRun*>& runs, const std::string& what);

// A note when some of `pairs` (a run and the run it is compared with) trained under two known
// identities: how many, the first as an example; nothing otherwise.
std::optional<Note> numerics_pairs_note(const std::vector<std::pair<const StudyRun*, const StudyRun*>>& pairs,
                                        const std::string& what);

}  // namespace fp4::reports
