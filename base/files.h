// files.h — whole files: read at once, and replaced so that a crash leaves either the old file or
// the new one, never a torn mixture (data files, manifests, checkpoints, status files and job
// scripts are written through here).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fp4 {

// The whole file. Throws std::runtime_error naming the path and the system's reason.
std::string read_file(const std::filesystem::path& path);

// Writes the concatenation of `parts` to `path`: first to a temporary file in the same directory,
// then fsync, rename over `path`, and fsync of the directory so the rename itself is durable.
// The temporary file is removed if anything fails. Throws std::runtime_error naming the path on
// I/O errors (disk full, permissions): those are failures of the run, not of the user's input.
void write_file_atomic(const std::filesystem::path& path, const std::vector<std::string_view>& parts);

// The name write_file_atomic gives its temporary file for `path` (a directory scan can recognise
// leftovers of an interrupted write by it).
std::filesystem::path temporary_path_for(const std::filesystem::path& path);

}  // namespace fp4
