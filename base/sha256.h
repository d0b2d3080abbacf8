// sha256.h — SHA-256 through OpenSSL's EVP interface: run ids, checkpoint checksums, the provenance
// of inputs and shards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fp4 {

// Incremental hashing: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex digits; the object cannot be updated afterwards.
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so OpenSSL's headers stay out of ours
};

std::string sha256_hex(std::string_view bytes);

// Hashes a whole file by streaming it; throws fp4::UserError naming the file if it cannot be opened
// (the path came from the user).
std::string sha256_file(const std::filesystem::path& path);

}  // namespace fp4
