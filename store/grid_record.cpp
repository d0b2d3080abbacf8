// grid_record.cpp — see grid_record.h.
#include "store/grid_record.h"

namespace fp4::store {

nlohmann::json fit_table_json(const FitTable& t) {
  nlohmann::json j = nlohmann::json::object();
  if (!t.laws.empty()) j["law"] = t.laws;
  if (t.n) j["n"] = *t.n;
  if (t.bootstrap) j["bootstrap"] = *t.bootstrap;
  if (t.seed) j["seed"] = *t.seed;
  if (t.huber_delta) j["huber_delta"] = *t.huber_delta;
  if (t.gamma) j["gamma"] = *t.gamma;
  if (t.targets) {
    j["targets"] = nlohmann::json::array();
    for (const auto& [n, d] : *t.targets) j["targets"].push_back({{"n", n}, {"d", d}});
  }
  return j;
}

}  // namespace fp4::store
