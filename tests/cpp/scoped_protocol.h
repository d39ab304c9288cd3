// Registers a protocol for the length of a scope (tests of the registry's rules).
#pragma once
#include <string>

#include "core/protocol.h"

namespace txn::test {

class ScopedProtocol {
 public:
  explicit ScopedProtocol(ProtocolSpec spec) : name_(spec.name) { register_protocol(std::move(spec)); }
  ~ScopedProtocol() { unregister_protocol(name_); }
  ScopedProtocol(const ScopedProtocol&) = delete;
  ScopedProtocol& operator=(const ScopedProtocol&) = delete;

 private:
  std::string name_;
};

}  // namespace txn::test
