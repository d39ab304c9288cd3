// Invariants: TXN_CHECK(cond, what) states one where it must hold. A violation is a bug in this process, not bad
// input (that is BadMessage's): it prints the file, line, condition and `what` on stderr and aborts, in every build
// type, so a run fails loudly (the run lifecycle records the process's signal) instead of going on wrong.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

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

// A transaction's phase moves from `phase` to `to` only along one of `allowed` (from, to) pairs, the protocol's
// transition table; any other move is a bug, reported at the caller's file and line (the table's).
template <class Phase>
void transition(uint64_t txn, Phase& phase, Phase to, std::initializer_list<std::pair<Phase, Phase>> allowed,
                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  bool ok = false;
  for (const auto& [from, into] : allowed) ok = ok || (from == phase && into == to);
  if (!ok)
    check_failed(file, line, "transition", "txn " + std::to_string(txn) + ": phase " +
                                               std::to_string(static_cast<int>(phase)) + " -> " +
                                               std::to_string(static_cast<int>(to)) + " is not in its table");
  phase = to;
}
}  // namespace txn
