// strict_json.h — JSON text read strictly, for files a person writes or may have tampered with
// (run configs, shard manifests).
//
// JSON allows a key twice in one object and nlohmann keeps the last value silently: a config with
// "lr": 0.001, "lr": 5 would train with 5. Here a repeated key is refused, naming the key, where
// it is repeated and where it first appeared. A number that overflows a double (1e400) is refused
// in the same one-line form instead of escaping as a library exception. Every message is
// "file:line:col: key.path: what is wrong", thrown as fp4::UserError.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fp4 {

// Parses `text`; `file` starts every message.
nlohmann::json parse_json_strictly(std::string_view text, const std::string& file);

}  // namespace fp4
