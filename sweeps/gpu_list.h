// gpu_list.h — lists of GPUs, read one way wherever fp4lab takes one: `sweep run --gpus`,
// [executor] gpus and the CUDA_VISIBLE_DEVICES it inherits.
//
// An entry is a device index (0 to 1023; "007" is 7) or a device UUID as `nvidia-smi -L` prints it
// ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", or a MIG device "MIG-..."). Each slot's runs get
// their entry as their CUDA_VISIBLE_DEVICES, so a UUID reaches CUDA as written. An empty entry,
// anything else, and a device listed twice are refused in one line that names where the list
// came from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp4::sweeps {

// Appends one entry to `list` (canonical: an index without leading zeros, a UUID as given);
// throws fp4::UserError "<where>: ..." for a bad entry or one already in the list.
void add_gpu(std::vector<std::string>& list, std::string_view entry, const std::string& where);

// A comma-separated list ("0,1", "GPU-8932f937-...,3"); "" is the empty list.
std::vector<std::string> parse_gpu_list(std::string_view text, const std::string& where);

}  // namespace fp4::sweeps
