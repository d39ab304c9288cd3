// Deliberately broken variants of SLOG for `make mutants` (tests/mutants/README.md).
// A mutant build compiles the SLOG sources with -DSLOG_MUTANT_<NAME> (CMake
// option MUTANT=slog.<name>, in its own build directory). A normal build
// defines none: every flag below is false and its branch compiles away.
#pragma once

namespace txn::slog::mutant {

#ifdef SLOG_MUTANT_NO_CONFLICT_WAIT
constexpr bool kNoConflictWait = true;     // an entry runs past earlier unfinished entries that hold its keys
#else
constexpr bool kNoConflictWait = false;
#endif

#ifdef SLOG_MUTANT_REVERSED_BATCHES
constexpr bool kReversedBatches = true;    // replica 1 of every shard appends each batch in reverse
#else
constexpr bool kReversedBatches = false;
#endif

#ifdef SLOG_MUTANT_SWAPPED_GLOBAL_ORDER
constexpr bool kSwappedGlobalOrder = true; // the global log swaps consecutive indices for region 1
#else
constexpr bool kSwappedGlobalOrder = false;
#endif

// Added for issue 30 (tests/mutants/README.md, "New mutants"). multi_home_jumps_log: a multi-home entry runs
// without waiting its turn in the local log, past earlier conflicting entries (seen by the order-key check: the
// local-log position is SLOG's key). reply_on_first_result: the client is answered before every shard executed.
#ifdef SLOG_MUTANT_MULTI_HOME_JUMPS_LOG
constexpr bool kMultiHomeJumpsLog = true;  // a multi-home entry waits for no earlier entry here (ordered globally)
#else
constexpr bool kMultiHomeJumpsLog = false;
#endif

#ifdef SLOG_MUTANT_REPLY_ON_FIRST_RESULT
constexpr bool kReplyOnFirstResult = true; // the handler answers on the first shard's result, not on all
#else
constexpr bool kReplyOnFirstResult = false;
#endif

}  // namespace txn::slog::mutant
