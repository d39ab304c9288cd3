// Shared main() of txn-server and txn-client (process contract in
// docs/deploy-schema.md).
#pragma once
#include <string>

namespace txn::runtime {

enum class Role { Server, Client };
int run_process(Role role, int argc, char** argv);

// runtime.connect_timeout_s from the deployment file (default 10).
double read_connect_timeout_s(const std::string& config_path);

}  // namespace txn::runtime
