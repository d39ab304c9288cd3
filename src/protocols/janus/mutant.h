// Deliberately broken variants of Janus for `make mutants` (tests/mutants/README.md).
// A mutant build compiles the Janus sources with -DJANUS_MUTANT_<NAME> (CMake
// option MUTANT=janus.<name>, in its own build directory). A normal build
// defines none: every flag below is false and its branch compiles away.
#pragma once

namespace txn::janus::mutant {

#ifdef JANUS_MUTANT_MAJORITY_REPLIES
constexpr bool kMajorityReplies = true;    // the coordinator decides on a majority of PreAccept replies per shard
#else
constexpr bool kMajorityReplies = false;
#endif

#ifdef JANUS_MUTANT_NO_COMPONENT_ORDER
constexpr bool kNoComponentOrder = true;   // members of a component run in arrival order, not by id
#else
constexpr bool kNoComponentOrder = false;
#endif

#ifdef JANUS_MUTANT_NO_EXTERNAL_WAIT
constexpr bool kNoExternalWait = true;     // a component does not wait for its members' dependencies outside it
#else
constexpr bool kNoExternalWait = false;
#endif

#ifdef JANUS_MUTANT_WRITES_ONLY
constexpr bool kWritesOnly = true;         // PreAccept ignores read keys (only writes make dependencies)
#else
constexpr bool kWritesOnly = false;
#endif

#ifdef JANUS_MUTANT_NO_DEPENDENCY_WAIT
constexpr bool kNoDependencyWait = true;   // a transaction runs once its component is known, whatever it waits for
#else
constexpr bool kNoDependencyWait = false;
#endif

// Added for issue 30 (tests/mutants/README.md, "New mutants"). component_order_descending: every replica runs a
// component's members by descending id, one serializable order but not Janus's (only the order-key check sees it).
// reply_on_first_result: the client is answered before every shard has executed.
#ifdef JANUS_MUTANT_COMPONENT_ORDER_DESCENDING
constexpr bool kComponentOrderDescending = true;  // members of a component run by descending id, at every replica
#else
constexpr bool kComponentOrderDescending = false;
#endif

// Added for issue 51 (the walk that decides components, replica.cc decide_sccs). settle_open: a walk decides a
// component that reaches a transaction not committed here yet, whose dependencies (and so the component) may still
// grow: replicas may then order one component's members differently, or a member before its ancestors.
#ifdef JANUS_MUTANT_SETTLE_OPEN
constexpr bool kSettleOpen = true;   // a component is decided though it reaches a transaction not committed here
#else
constexpr bool kSettleOpen = false;
#endif

#ifdef JANUS_MUTANT_REPLY_ON_FIRST_RESULT
constexpr bool kReplyOnFirstResult = true;  // the coordinator answers on the first shard's result, not on all
#else
constexpr bool kReplyOnFirstResult = false;
#endif

// Added for issue 49 (a replica down is not an outage). slow_path_on_minority: after the PreAccept timeout a shard
// is decided on 1 reply, not a majority's. no_pending_deps: replicas reply with their direct predecessors only, so a
// decision on a majority may miss the only link between two conflicting transactions (docs/protocols/janus.md).
#ifdef JANUS_MUTANT_SLOW_PATH_ON_MINORITY
constexpr bool kSlowPathOnMinority = true;
#else
constexpr bool kSlowPathOnMinority = false;
#endif

// timeout_skips_accept: after the PreAccept timeout a majority's replies are committed at once, without the Accept
// round (a decision no majority accepted, which a recovering coordinator could not find).
#ifdef JANUS_MUTANT_TIMEOUT_SKIPS_ACCEPT
constexpr bool kTimeoutSkipsAccept = true;
#else
constexpr bool kTimeoutSkipsAccept = false;
#endif

#ifdef JANUS_MUTANT_NO_PENDING_DEPS
constexpr bool kNoPendingDeps = true;
#else
constexpr bool kNoPendingDeps = false;
#endif

// A restarted replica votes again (issue 63): mixes_epochs, the coordinator counts a reply of an older epoch with
// one of the newer (a forgotten vote counted beside a vote cast after the seal); keeps_epoch, a replica answers a
// Seal without moving to the new epoch (its replies cast before the rejoin still count with the rejoined one's).
#ifdef JANUS_MUTANT_MIXES_EPOCHS
constexpr bool kMixesEpochs = true;
#else
constexpr bool kMixesEpochs = false;
#endif

#ifdef JANUS_MUTANT_KEEPS_EPOCH
constexpr bool kKeepsEpoch = true;
#else
constexpr bool kKeepsEpoch = false;
#endif

// Added for issue 63: forgets_components forgets each member of a decided component as soon as it is settled here, as
// if it were a component of its own (a replica that asks of it then learns the wrong component).
#ifdef JANUS_MUTANT_FORGETS_COMPONENTS
constexpr bool kForgetsComponents = true;
#else
constexpr bool kForgetsComponents = false;
#endif

}  // namespace txn::janus::mutant
