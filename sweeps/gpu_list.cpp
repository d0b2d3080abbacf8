// gpu_list.cpp — see gpu_list.h.
#include "sweeps/gpu_list.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "base/parse_number.h"
#include "base/user_error.h"

namespace fp4::sweeps {

namespace {

constexpr int kMaxIndex = 1023;

bool is_uuid(std::string_view e) {
  if (e.rfind("GPU-", 0) != 0 && e.rfind("MIG-", 0) != 0) return false;
  return e.size() > 4 && std::all_of(e.begin() + 4, e.end(), [](unsigned char c) {
           return std::isalnum(c) || c == '-' || c == '/';
         });
}

}  // namespace

void add_gpu(std::vector<std::string>& list, std::string_view entry, const std::string& where) {
  std::string canonical;
  if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const std::optional<int> index = parse_integer<int>(entry);
    if (!index || *index > kMaxIndex)
      throw UserError(fmt::format("{}: GPU index {} is out of range (0 to {})", where, entry, kMaxIndex));
    canonical = std::to_string(*index);
  } else if (is_uuid(entry)) {
    canonical = std::string(entry);
  } else {
    throw UserError(fmt::format("{}: \"{}\" is not a GPU: give device indices (0,1) or UUIDs as nvidia-smi -L "
                                "prints them (GPU-...), separated by commas",
                                where, entry));
  }
  if (std::find(list.begin(), list.end(), canonical) != list.end())
    throw UserError(fmt::format("{}: lists GPU {} twice; name each GPU once (runs_per_gpu shares one)", where,
                                canonical));
  list.push_back(std::move(canonical));
}

std::vector<std::string> parse_gpu_list(std::string_view text, const std::string& where) {
  std::vector<std::string> list;
  if (text.empty()) return list;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    add_gpu(list, text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start), where);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return list;
}

}  // namespace fp4::sweeps
