// provenance.h — where and with what an attempt ran: recorded in the store with every attempt so a
// result can always be traced to a machine, a GPU, a driver and a source commit.
#pragma once

#include <string>

#include "store/store.h"

namespace fp4::sweeps {

// This process's provenance: host name; the source commit and dirty flag recorded when this
// binary was built (cmake/build_info.cmake); fp4lab's version; the CUDA toolkit it was built
// against; the first GPU's name and driver as nvidia-smi reports them (empty without one); the
// versions of the libraries that shape results or the store (SQLite, Eigen, OpenSSL, fmt).
// `devices` is the caller's ("cpu:2", "cuda:0").
store::Provenance current_provenance(const std::string& devices);

// The host name (gethostname), "unknown" if it cannot be read.
std::string host_name();

}  // namespace fp4::sweeps
