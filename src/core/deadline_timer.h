// One node timer for many deadlines: a coordinator whose rounds each have a deadline (TAPIR's Prepare timeout,
// Janus's PreAccept timeout) arms it for the earliest, not one timer per round, so that a failure-free run, whose
// rounds end long before their deadlines, wakes for it about once per timeout, not once per transaction.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "node.h"

namespace txn {

class DeadlineTimer {
 public:
  explicit DeadlineTimer(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Armed for `deadline` unless already armed for no later (it re-arms for the rest when it fires).
  void arm(Env& env, TimeUs deadline) {
    if (at_ != 0 && at_ <= deadline) return;
    const TimeUs now = env.mono_us();
    at_ = deadline;
    env.set_timer(id_, deadline > now ? deadline - now : 0);
  }

  // When it fires: the keys of `rounds` whose deadline has passed, ascending (the same order at every run of the
  // simulator), re-armed for the earliest deadline still ahead. deadline_of(value) is a round's deadline, or 0 when
  // it has none (decided, or already timed out). A timer that fires a little early finds nothing due and is armed
  // again for the rest.
  template <class Map, class DeadlineOf>
  std::vector<typename Map::key_type> fire(Env& env, const Map& rounds, DeadlineOf deadline_of) {
    const TimeUs now = env.mono_us();
    at_ = 0;
    std::vector<typename Map::key_type> due;
    TimeUs next = 0;
    for (const auto& [key, value] : rounds) {
      const TimeUs d = deadline_of(value);
      if (d == 0) continue;
      if (d <= now) due.push_back(key);
      else if (next == 0 || d < next) next = d;
    }
    std::sort(due.begin(), due.end());
    if (next != 0) arm(env, next);
    return due;
  }

 private:
  uint64_t id_;
  TimeUs at_ = 0;   // when the armed timer fires (0: none armed)
};

}  // namespace txn
