// Shared main() of txn-server and txn-client (process contract in
// docs/deploy-schema.md).
#pragma once
#include <string>

namespace txn::runtime {

enum class Role { Server, Client };
int run_process(Role role, int argc, char** argv);

}  // namespace txn::runtime
