#pragma once
// A process's or thread's own CPU (user + system) and voluntary context switches (the waits in which it slept:
// its wake-ups), by getrusage: what txn-server reports in its facts, txn-sim per committed transaction and
// txn-wakecost per wake-up (docs/efficiency.md).
#include <sys/resource.h>

namespace txn {

struct Usage {
  double cpu_s = 0;
  long voluntary_switches = 0;
};

inline Usage own_usage(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return {static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6,
          u.ru_nvcsw};
}

}  // namespace txn
