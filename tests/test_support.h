// test_support.h — helpers the tests share: scratch directories, file bytes, running the fp4lab
// binary, a committed study's copy, hand-built .npy files, bitwise comparison of float vectors, an
// environment variable set for a scope.
// Header-only, so each test file just includes it.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp4::test {

// The data source of the tiny runs that tests train, alone or in a sweep: a first-order Markov
// chain over 64 symbols.
inline constexpr const char* kTinyRunData = "synthetic:markov?order=1&vocab=64&branch=4&seed=1";

// An environment variable set (or unset, for a null value) for the lifetime of the object, then
// restored as it was: for settings a component reads from the environment (FP4LAB_TRAINER,
// FP4LAB_CUDA_GRAPHS, the MoE ones).
class EnvSetting {
 public:
  EnvSetting(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~EnvSetting() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  EnvSetting(const EnvSetting&) = delete;
  EnvSetting& operator=(const EnvSetting&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A fresh directory under the system temp dir, removed (with everything in it) on destruction.
// mkdtemp gives every test process its own directory, so ctest -j runs cannot collide.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "fp4lab-test-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// One scratch directory for the whole test process, made on first use and removed when the test
// binary exits: for helpers that write files without a ScratchDir of their own in scope.
inline const std::filesystem::path& process_scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// An executable script (its owner may read, write and run it): a stand-in for a program a test
// runs fp4lab against.
inline void write_script(const std::filesystem::path& p, const std::string& text) {
  spit(p, text);
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
}

// How many times `needle` starts in `text` (overlapping occurrences counted).
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every ```sql block of a Markdown text (the docs' example queries, which tests run).
inline std::vector<std::string> sql_blocks(const std::string& doc) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = doc.find("```sql\n", at)) != std::string::npos) {
    const size_t body = at + 7;
    const size_t end = doc.find("```", body);
    if (end == std::string::npos) break;
    out.push_back(doc.substr(body, end - body));
    at = end + 3;
  }
  return out;
}

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs `fp4lab ARGS` (ARGS already shell-quoted) with no standard input; its stdout and stderr go
// through files in `dir`.
inline CliRun run_fp4lab(const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "cli-stdout.txt", err = dir / "cli-stderr.txt";
  const std::string cmd = std::string("'") + FP4LAB_BINARY + "' " + args + " >'" + out.string() + "' 2>'" +
                          err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline CliRun run_fp4lab(const std::string& args, const ScratchDir& scratch) {
  return run_fp4lab(args, scratch.path());
}

// A committed study (results/NAME of the source tree) copied for a test to run fp4lab on: its TOMLs,
// and its store NAME.db.xz decompressed beside them as NAME.db (the tree itself is never written).
// False, with nothing copied, when xz(1) is not on PATH: the caller skips with a warning.
inline bool copy_committed_study(const std::string& name, const std::filesystem::path& dir) {
  if (std::system("command -v xz >/dev/null 2>&1") != 0) return false;
  const std::filesystem::path source = std::filesystem::path(FP4LAB_SOURCE_DIR) / "results" / name;
  for (const auto& e : std::filesystem::directory_iterator(source))
    if (e.path().extension() == ".toml") std::filesystem::copy_file(e.path(), dir / e.path().filename());
  const std::string cmd =
      "xz -dc '" + (source / (name + ".db.xz")).string() + "' > '" + (dir / (name + ".db")).string() + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("copy_committed_study: " + cmd + " failed");
  return true;
}

// Appends the low `bytes` bytes of v, little-endian.
inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

// The header dict NumPy writes for a C-order array: npy_dict("<f4", "(3, 4)").
inline std::string npy_dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// A .npy file as NumPy writes it: magic, version, header length, the dict padded with spaces to a
// 64-byte boundary and ended by a newline, then the data. Built byte by byte here (not with
// quant/npy) so that the reader is tested against the format, not against itself.
inline std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  put_le(out, header.size(), major == 1 ? 2 : 4);
  return out + header + data;
}

// Whether two float vectors hold the same bits (NaN payloads and signed zeros included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace fp4::test
