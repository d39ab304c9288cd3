// A coordinator's side of a restarted replica's rejoin (docs/fault-tolerance.md, "Restart"): a decision counts the
// votes of one epoch only, so that no vote cast before a seal counts with one cast after it (a forgotten vote
// beside its replica's new one). Janus's PreAccept replies and TAPIR's Prepare results go through it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace txn {

// The epochs of one shard's votes in one round: the newest its votes carried, and for each replica asked again the
// epoch it was asked in (plus 1: 0 is none).
struct RoundEpoch {
  uint64_t now = 0;
  std::map<uint32_t, uint64_t> asked;

  // A vote of `replica` cast in `epoch` came, with `replied` the replicas whose votes of the round count so far.
  // True: count it. An older vote is not counted and its replica asked again (it answers its same vote in its epoch
  // now); a newer one drops every vote counted so far (drop()) and asks their replicas again. A replica is asked at
  // most once per epoch this way (the round's timeout asks again). `mix` (a mutant): count it whatever its epoch.
  bool take(uint64_t epoch, uint32_t replica, const std::vector<uint32_t>& replied, const std::function<void()>& drop,
            const std::function<void(uint32_t)>& ask, bool mix = false) {
    auto again = [&](uint32_t r) {
      uint64_t& a = asked[r];
      if (a > now) return;
      a = now + 1;
      ask(r);
    };
    if (epoch < now && !mix) {
      again(replica);
      return false;
    }
    if (epoch > now) {
      drop();
      now = epoch;
      for (uint32_t r : replied)
        if (r != replica) again(r);
    }
    return true;
  }
};

}  // namespace txn
