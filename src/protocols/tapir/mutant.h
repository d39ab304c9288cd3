// Deliberately broken variants of TAPIR for `make mutants` (tests/mutants/README.md).
// A mutant build compiles the TAPIR sources with -DTAPIR_MUTANT_<NAME> (CMake
// option MUTANT=tapir.<name>, in its own build directory). A normal build
// defines none: every flag below is false and its branch compiles away.
#pragma once

namespace txn::tapir::mutant {

#ifdef TAPIR_MUTANT_NO_ABSTAIN
constexpr bool kNoAbstain = true;          // Prepare ignores conflicting prepared or unapplied transactions
#else
constexpr bool kNoAbstain = false;
#endif

#ifdef TAPIR_MUTANT_NO_STALE_CHECK
constexpr bool kNoStaleCheck = true;       // Prepare ignores the read versions
#else
constexpr bool kNoStaleCheck = false;
#endif

#ifdef TAPIR_MUTANT_APPLY_WITHOUT_DEPS
constexpr bool kApplyWithoutDeps = true;   // a Commit is applied on arrival, not after its dependencies
#else
constexpr bool kApplyWithoutDeps = false;
#endif

#ifdef TAPIR_MUTANT_UNAPPLIED_NOT_HELD
constexpr bool kUnappliedNotHeld = true;   // a committed transaction not prepared here holds nothing until applied
#else
constexpr bool kUnappliedNotHeld = false;
#endif

// Added for issue 30 (tests/mutants/README.md, "New mutants"): validation rules. no_write_write: two
// read-modify-writes of one key both prepare OK and commit with no dependency between them (lost update, replicas
// apply them in arrival order). reads_unvalidated: a transaction that read a key another one has since overwritten
// commits with the stale value (the replay's outputs differ).
#ifdef TAPIR_MUTANT_NO_WRITE_WRITE
constexpr bool kNoWriteWrite = true;       // the OCC check ignores write-write conflicts with prepared holders
#else
constexpr bool kNoWriteWrite = false;
#endif

#ifdef TAPIR_MUTANT_READS_UNVALIDATED
constexpr bool kReadsUnvalidated = true;   // Prepare validates the versions of the keys it writes only
#else
constexpr bool kReadsUnvalidated = false;
#endif

// Added for issue 49 (a replica down is not an outage): the slow path after the Prepare timeout decides a shard on
// whatever results are in, one replica's included, instead of a majority's; two conflicting transactions can then
// commit on disjoint replicas, each never having seen the other.
#ifdef TAPIR_MUTANT_TIMEOUT_ON_MINORITY
constexpr bool kTimeoutOnMinority = true;  // after the timeout a shard is decided on 1 result of 3
#else
constexpr bool kTimeoutOnMinority = false;
#endif

// Added for issue 49 (decisions in the histories, q= and a=): a slow-path decision holds once a majority has it.
#ifdef TAPIR_MUTANT_FINALIZE_ON_ONE
constexpr bool kFinalizeOnOne = true;   // a shard decided on the slow path counts once 1 replica confirmed its Finalize
#else
constexpr bool kFinalizeOnOne = false;
#endif

// A restarted replica votes again (issue 63): mixes_epochs, the coordinator counts a result of an older epoch with
// one of the newer; keeps_epoch, a replica answers a Seal without moving to the new epoch.
#ifdef TAPIR_MUTANT_MIXES_EPOCHS
constexpr bool kMixesEpochs = true;
#else
constexpr bool kMixesEpochs = false;
#endif

#ifdef TAPIR_MUTANT_KEEPS_EPOCH
constexpr bool kKeepsEpoch = true;
#else
constexpr bool kKeepsEpoch = false;
#endif

}  // namespace txn::tapir::mutant
