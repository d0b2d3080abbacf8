// checkpoint.cpp — see checkpoint.h.
#include "engine/run/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "base/files.h"
#include "base/parse_number.h"
#include "base/sha256.h"

namespace fp4::run {

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian");

namespace {

constexpr char kMagic[8] = {'F', 'P', '4', 'L', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 96;
constexpr size_t kDigestAt = 24, kDigestSize = 64;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

std::string_view bytes_of(const std::vector<float>& a) {
  return {reinterpret_cast<const char*>(a.data()), a.size() * sizeof(float)};
}

// The file as pieces: [0] the header (owned by `header`), then the payload's pieces, which view
// the state's arrays directly so a checkpoint is hashed and written without copying the weights.
std::vector<std::string_view> encode_parts(const CheckpointState& s, std::string& header, std::string& prefix) {
  const size_t n = s.params.size();
  if (s.adam_m.size() != n || s.adam_v.size() != n)
    throw std::logic_error("encode_checkpoint: params, adam_m and adam_v differ in length");
  const nlohmann::json meta = {{"format", kVersion},
                               {"step", s.step},
                               {"tokens_seen", s.tokens_seen},
                               {"config_hash", s.config_hash},
                               {"data_position", s.data_position},
                               {"extra", s.extra},
                               {"arrays", nlohmann::json::array({{{"name", "params"}, {"count", n}},
                                                                 {{"name", "adam_m"}, {"count", n}},
                                                                 {{"name", "adam_v"}, {"count", n}}})}};
  const std::string meta_text = meta.dump();
  prefix.clear();
  put<uint64_t>(prefix, meta_text.size());
  prefix += meta_text;
  std::vector<std::string_view> parts = {std::string_view(), prefix, bytes_of(s.params), bytes_of(s.adam_m),
                                         bytes_of(s.adam_v)};
  Sha256 h;
  uint64_t payload_size = 0;
  for (size_t i = 1; i < parts.size(); ++i) {
    h.update(parts[i]);
    payload_size += parts[i].size();
  }
  header.clear();
  header.append(kMagic, sizeof kMagic);
  put<uint32_t>(header, kVersion);
  put<uint32_t>(header, static_cast<uint32_t>(kHeaderSize));
  put<uint64_t>(header, payload_size);
  header += h.hex();
  header.append(kHeaderSize - header.size(), '\0');
  parts[0] = header;
  return parts;
}

}  // namespace

std::string encode_checkpoint(const CheckpointState& s) {
  std::string header, prefix, out;
  for (std::string_view part : encode_parts(s, header, prefix)) out += part;
  return out;
}

CheckpointState decode_checkpoint(std::string_view bytes, const std::string& name) {
  const auto bad = [&](const std::string& what) -> CheckpointError {
    return CheckpointError(name + ": " + what);
  };
  if (bytes.size() < kHeaderSize) throw bad(fmt::format("truncated ({} bytes, shorter than the header)", bytes.size()));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) throw bad("not an fp4lab checkpoint (bad magic)");
  const uint32_t version = get<uint32_t>(bytes, 8);
  if (version != kVersion) throw bad(fmt::format("format version {} (this build reads {})", version, kVersion));
  if (get<uint32_t>(bytes, 12) != kHeaderSize) throw bad("bad header size");
  for (size_t i = kDigestAt + kDigestSize; i < kHeaderSize; ++i)
    if (bytes[i] != '\0') throw bad("bad header padding");
  const uint64_t payload_size = get<uint64_t>(bytes, 16);
  if (bytes.size() - kHeaderSize != payload_size)
    throw bad(fmt::format("truncated or padded: the header promises {} payload bytes, the file has {}", payload_size,
                          bytes.size() - kHeaderSize));
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (sha256_hex(payload) != bytes.substr(kDigestAt, kDigestSize))
    throw bad("checksum mismatch (the SHA-256 of the payload differs from the header's): the file is corrupted");

  // From here on the bytes are what was written; a failure is a format bug, still reported.
  if (payload.size() < 8) throw bad("payload too short");
  const uint64_t meta_size = get<uint64_t>(payload, 0);
  if (meta_size > payload.size() - 8) throw bad("meta runs past the payload");
  CheckpointState s;
  size_t at = 8 + meta_size;
  try {
    const nlohmann::json meta = nlohmann::json::parse(payload.substr(8, meta_size));
    s.step = meta.at("step").get<int64_t>();
    s.tokens_seen = meta.at("tokens_seen").get<int64_t>();
    s.config_hash = meta.at("config_hash").get<std::string>();
    s.data_position = meta.at("data_position");
    s.extra = meta.at("extra");
    for (const auto& a : meta.at("arrays")) {
      const std::string array = a.at("name").get<std::string>();
      const uint64_t count = a.at("count").get<uint64_t>();
      std::vector<float>* dst = array == "params" ? &s.params
                                : array == "adam_m" ? &s.adam_m
                                : array == "adam_v" ? &s.adam_v
                                                    : nullptr;
      if (dst == nullptr) throw bad("unknown array \"" + array + "\"");
      if (count > (payload.size() - at) / sizeof(float)) throw bad("array \"" + array + "\" runs past the payload");
      dst->resize(count);
      // An empty vector's data() may be null, and memcpy's arguments must not be, even for 0 bytes.
      if (count > 0) std::memcpy(dst->data(), payload.data() + at, count * sizeof(float));
      at += count * sizeof(float);
    }
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("bad meta: ") + e.what());
  }
  if (at != payload.size()) throw bad("trailing bytes after the arrays");
  if (s.adam_m.size() != s.params.size() || s.adam_v.size() != s.params.size())
    throw bad("params, adam_m and adam_v differ in length");
  return s;
}

std::string checkpoint_file_name(int64_t step) { return fmt::format("step_{:010d}.ckpt", step); }

std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir) {
  std::vector<std::pair<int64_t, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return {};
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    // step_<digits>.ckpt exactly: temporaries (".step_...tmp") and ".corrupt" files are not ours.
    if (name.size() < 11 || name.rfind("step_", 0) != 0 || name.substr(name.size() - 5) != ".ckpt") continue;
    const std::string digits = name.substr(5, name.size() - 10);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found.emplace_back(*parse_integer<int64_t>(digits), e.path());  // <= 18 digits fit
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::filesystem::path write_checkpoint(const std::filesystem::path& dir, const CheckpointState& s) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / checkpoint_file_name(s.step);
  std::string header, prefix;
  write_file_atomic(path, encode_parts(s, header, prefix));
  std::vector<std::filesystem::path> all = list_checkpoints(dir);
  for (size_t i = 0; i + kCheckpointsKept < all.size(); ++i) std::filesystem::remove(all[i]);
  return path;
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  LoadedCheckpoint out;
  std::vector<std::filesystem::path> bad;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      out.state = decode_checkpoint(read_file(*it), it->string());
      out.path = *it;
      // Only now that a fallback exists are the bad ones set aside; were none valid, they stay
      // where they are, so every later attempt reports the same error instead of starting over.
      for (size_t i = 0; i < bad.size(); ++i) {
        std::filesystem::path aside = bad[i];
        aside += ".corrupt";
        std::error_code ec;
        std::filesystem::rename(bad[i], aside, ec);
        if (!ec) out.warnings[i] += " (renamed to " + aside.filename().string() + ")";
      }
      return out;
    } catch (const std::runtime_error& e) {  // CheckpointError, or an unreadable file
      out.warnings.push_back(std::string("skipping checkpoint ") + e.what());
      bad.push_back(*it);
    }
  }
  std::string why;
  for (const auto& w : out.warnings) why += "; " + w;
  throw CheckpointError(fmt::format("no valid checkpoint in {}: all {} failed verification{}", dir.string(),
                                    all.size(), why));
}

}  // namespace fp4::run
