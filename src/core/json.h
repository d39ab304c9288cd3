// Small helpers for the JSON the processes write by hand.
#pragma once
#include <cstdio>
#include <string>

namespace txn {

// `s` as a JSON string literal, quotes included.
inline std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

}  // namespace txn
