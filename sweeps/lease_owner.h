// lease_owner.h — who holds a run's lease, and whether that holder still lives.
//
// An owner is "host/pid/start", start being the process's start time in clock ticks since boot
// (/proc/<pid>/stat field 22): a pid can be reused, a (pid, start) pair cannot. On the owner's own
// host a dead owner is recognised at once, so a SIGKILLed orchestrator's runs can be resumed
// immediately; across hosts only the lease's expiry tells.
#pragma once

#include <string>

namespace fp4::sweeps {

// This process's owner string.
std::string current_lease_owner();

enum class OwnerLiveness { alive, dead, unknown /* another host: trust the lease's expiry */ };
OwnerLiveness owner_liveness(const std::string& owner);

}  // namespace fp4::sweeps
