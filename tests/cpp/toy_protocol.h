// The toy protocol of the contract test (toy_protocol.cc), and deliberately
// broken variants of it that the history checker must catch
// (test_protocol_sim.cc, ProtocolSimMutant.*). Only "toy" itself is registered
// for the whole suite; a test registers a variant for its own length
// (scoped_protocol.h).
#pragma once
#include <string>

#include "core/protocol.h"

namespace txn::toy {

enum class Fault {
  None,
  // Shard 0's order swaps adjacent transactions: the sequencer holds each one
  // back (up to 20 ms) and orders the next one before it when the two
  // conflict on shard 0 and on another shard (which keeps the global order)
  // and the later one needs no value from another shard (so the swap cannot
  // deadlock). Every replica of shard 0 executes the same order, so the
  // replicas agree and their digests match, yet every swap makes the run
  // non-serializable.
  SwapPairsAtShard0,
};

// The toy protocol's registration under `name`, with `fault` built in.
ProtocolSpec spec(const std::string& name = "toy", Fault fault = Fault::None);

// Fault::SwapPairsAtShard0: the pairs the toy's sequencer node has swapped so far.
uint64_t swapped_pairs(const Node& sequencer);

}  // namespace txn::toy
