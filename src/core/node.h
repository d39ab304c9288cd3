// The protocol/transport boundary (etcd/raft style). A Node is a deterministic
// state machine: messages and timers in, messages and timers out through Env.
// The gRPC runtime (src/runtime) and the simulated network (src/sim) both
// implement Env, so every protocol runs unchanged under either.
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "envelope.pb.h"

namespace txn {

using NodeId = uint32_t;
using TimeUs = int64_t;   // microseconds

class Env {
 public:
  virtual ~Env() = default;
  // Protocol clock in microseconds. Real runtime: wall clock (comparable
  // across processes and, with NTP, across hosts). Simulation: virtual time.
  virtual TimeUs now_us() = 0;
  // Monotonic clock for latency measurement (never jumps). Simulation: virtual time.
  virtual TimeUs mono_us() = 0;
  // Queue a message; env fills in `from`, `to` and `sent_us`. Never blocks.
  virtual void send(NodeId to, Envelope msg) = 0;
  // Fire on_timer(id) after `delay_us`. Re-arming an id adds another firing.
  virtual void set_timer(uint64_t id, TimeUs delay_us) = 0;
  // Deterministic per-node random source (seeded from the deployment file).
  virtual std::mt19937_64& rng() = 0;
  // Node's own id.
  virtual NodeId self() const = 0;
  // One-line diagnostic (runtime: stderr with node name; sim: captured).
  virtual void log(const std::string& line) = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual void start(Env& env) = 0;
  // `msg` is the node's to take from: the runtime and the simulator discard it afterwards, so a node keeps what
  // it needs by moving it out (a stored request) rather than copying it.
  virtual void on_message(Env& env, Envelope& msg) = 0;
  virtual void on_timer(Env& env, uint64_t id) = 0;
  // True when the node holds no unfinished work (used to decide when a
  // draining server may dump state and exit).
  virtual bool idle() const { return true; }
};

// Thrown by a node for a message it cannot accept (unknown txn shape, bad
// shard, missing field). The runtime logs it as one line and drops the
// message; the node's state is unchanged.
struct BadMessage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace txn
