// lease_owner.cpp — see lease_owner.h.
#include "sweeps/lease_owner.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "base/parse_number.h"
#include "sweeps/provenance.h"

namespace fp4::sweeps {

namespace {

// Field 22 of /proc/<pid>/stat, or "" when the process does not exist. The command name (field
// 2) is parenthesised and may hold spaces, so fields are counted after its closing parenthesis.
std::string process_start_ticks(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return "";
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return "";
  return field;  // field 22: starttime
}

}  // namespace

std::string current_lease_owner() {
  const long pid = static_cast<long>(::getpid());
  return host_name() + "/" + std::to_string(pid) + "/" + process_start_ticks(pid);
}

OwnerLiveness owner_liveness(const std::string& owner) {
  const size_t b = owner.rfind('/');
  const size_t a = b == std::string::npos || b == 0 ? std::string::npos : owner.rfind('/', b - 1);
  if (a == std::string::npos) return OwnerLiveness::unknown;
  if (owner.substr(0, a) != host_name()) return OwnerLiveness::unknown;
  const std::optional<long> pid = parse_integer<long>(std::string_view(owner).substr(a + 1, b - a - 1));
  if (!pid) return OwnerLiveness::unknown;
  const std::string start = process_start_ticks(*pid);
  return !start.empty() && start == owner.substr(b + 1) ? OwnerLiveness::alive : OwnerLiveness::dead;
}

}  // namespace fp4::sweeps
