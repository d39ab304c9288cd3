// txn-server: see the process contract in docs/deploy-schema.md.
#include "runtime/process.h"

int main(int argc, char** argv) { return txn::runtime::run_process(txn::runtime::Role::Server, argc, argv); }
