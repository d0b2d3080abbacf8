// text_input.h — reading an input text file as a byte stream, decompressing .xz on the way.
//
// A name ending in ".xz" is decompressed by running `xz -dc -- FILE` as a child process (fork and
// exec with an argument vector, never a shell); its standard output is read through a pipe and its
// exit status checked at the end, so a damaged archive is an error rather than silently short
// text. Other compressed formats (.gz, .bz2, .zst, .lz4, .zip) are refused with a message saying to
// decompress them; every other name is read as plain text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace fp4::data {

// Refuses (UserError naming the file) a name in a compressed format TextInput does not
// read; lets callers check every input before they start writing anything.
void check_text_input_name(const std::filesystem::path& path);

class TextInput {
 public:
  explicit TextInput(const std::filesystem::path& path);
  ~TextInput();
  TextInput(const TextInput&) = delete;
  TextInput& operator=(const TextInput&) = delete;

  // Reads up to `size` bytes of text; returns 0 only at the end. At the end of an .xz input the
  // child's exit status is checked: a failure throws UserError naming the file.
  size_t read(char* out, size_t size);

  bool compressed() const { return compressed_; }
  // Total text bytes when known in advance (plain files); empty for .xz.
  std::optional<uint64_t> text_size() const { return text_size_; }

 private:
  void finish_child();

  std::filesystem::path path_;
  int fd_ = -1;
  int child_ = -1;  // pid of xz, or -1
  bool compressed_ = false;
  std::optional<uint64_t> text_size_;
};

}  // namespace fp4::data
