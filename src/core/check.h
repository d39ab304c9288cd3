// Invariants: TXN_CHECK(cond, what) states one where it must hold. A violation is a bug in this process, not bad
// input (that is BadMessage's): it prints the file, line, condition and `what` on stderr and aborts, in every build
// type, so a run fails loudly (the run lifecycle records the process's signal) instead of going on wrong.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#define TXN_CHECK(cond, what)                                                                       \
  do {                                                                                              \
    if (!(cond)) ::txn::check_failed(__FILE__, __LINE__, #cond, std::string(what));                  \
  } while (0)

namespace txn {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& what) {
  std::fprintf(stderr, "invariant violated at %s:%d: %s: %s\n", file, line, cond, what.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace txn
