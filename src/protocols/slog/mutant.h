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

}  // namespace txn::slog::mutant
