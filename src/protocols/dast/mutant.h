// Deliberately broken variants of DAST for `make mutants` (tests/mutants/README.md).
// A mutant build compiles the DAST sources with -DDAST_MUTANT_<NAME> (CMake
// option DAST_MUTANT=<name>, in its own build directory). A normal build
// defines none: every flag below is false and its branch compiles away.
#pragma once

namespace txn::dast::mutant {

#ifdef DAST_MUTANT_NO_STRETCH
constexpr bool kNoStretch = true;           // fresh() never clamps below a pending CRT
#else
constexpr bool kNoStretch = false;
#endif

#ifdef DAST_MUTANT_WATERMARK_LOCAL
constexpr bool kWatermarkLocal = true;      // execute once the own clock is past, ignoring the other handlers
#else
constexpr bool kWatermarkLocal = false;
#endif

#ifdef DAST_MUTANT_ONE_ACK
constexpr bool kOneAck = true;              // an IRT commits on one stored copy per shard
#else
constexpr bool kOneAck = false;
#endif

#ifdef DAST_MUTANT_CRT_AT_PROPOSAL
constexpr bool kCrtAtProposal = true;       // a replica executes a CRT at its own proposal, not at the decision
#else
constexpr bool kCrtAtProposal = false;
#endif

#ifdef DAST_MUTANT_NO_COUNTER_PROPOSAL
constexpr bool kNoCounterProposal = true;   // a T_r at or below the replica's clock is accepted as it is
#else
constexpr bool kNoCounterProposal = false;
#endif

// Added for issue 49 (a replica down): the leader's proposal is the shard's, and a follower executes the leader's
// order, each transaction once it has it.
#ifdef DAST_MUTANT_DECIDE_WITHOUT_LEADER
constexpr bool kDecideWithoutLeader = true; // the coordinator decides on any 2 of 3 proposals per shard, the leader's or not
#else
constexpr bool kDecideWithoutLeader = false;
#endif

#ifdef DAST_MUTANT_FOLLOWER_SKIPS_UNSTORED
constexpr bool kFollowerSkipsUnstored = true; // a follower passes over a transaction of the leader's order it has not stored yet
#else
constexpr bool kFollowerSkipsUnstored = false;
#endif

// Added for issue 30 (tests/mutants/README.md, "New mutants"). pass_undecided: a race every replica makes alike
// (an IRT runs above a CRT whose decision has not come; if the decision lands below the IRT, the CRT runs after
// it): serializable, in another order than the timestamps, seen by the order-key check. reply_on_home_result: the
// client is answered before every shard has executed (the outputs it gets lack the other shards').
#ifdef DAST_MUTANT_PASS_UNDECIDED
constexpr bool kPassUndecided = true;       // the queue's first decided entry executes past undecided CRTs below it
#else
constexpr bool kPassUndecided = false;
#endif

#ifdef DAST_MUTANT_REPLY_ON_HOME_RESULT
constexpr bool kReplyOnHomeResult = true;   // the coordinator answers once the home shard's result is in
#else
constexpr bool kReplyOnHomeResult = false;
#endif

}  // namespace txn::dast::mutant
