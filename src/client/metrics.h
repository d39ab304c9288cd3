// Raw per-transaction records and their summary (nearest-rank percentiles).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "node.h"

namespace txn {

struct TxnRecord {
  uint64_t txn_id = 0;
  uint32_t type = 0;
  bool crt = false;
  // Monotonic, relative to the client's run start: the intended start (closed loop: the first attempt's issue; open
  // loop: the arrival, before any wait for a free coordinator), so a stall counts in every transaction it delayed.
  TimeUs start_us = 0;
  TimeUs latency_us = 0;   // intended start -> commit (or give-up); start_us + latency_us is the answer's time
  uint32_t attempts = 0;
  bool committed = false;
  std::string outputs;     // committed: outputs_digest of the reply (core/executor.h)
  uint32_t session = 0;    // the client's coordinator (slot) that ran it: its own order is the session's
  // The first attempt's actual send, as start_us. Closed loop: start_us; open loop: start_us plus its wait for a
  // coordinator. The checker's real-time order uses it (histories.py): an earlier issue time would only widen the
  // transaction's interval, dropping real-time edges (never adding a false one), so the send keeps the check whole.
  TimeUs sent_us = 0;
  bool abandoned = false;  // not committed: still in flight when the drain timeout ran out (outcome unknown)
};

// Nearest-rank percentile of an ascending-sorted vector: sorted[ceil(p/100*n)-1].
// p in (0, 100]. Throws std::invalid_argument for empty input or p out of range.
double percentile_nearest_rank(const std::vector<double>& sorted, double p);

struct ClassSummary {
  uint64_t committed = 0;
  uint64_t given_up = 0;    // aborted on every attempt the retry limit allows
  uint64_t abandoned = 0;   // still in flight when the drain timeout ran out
  uint64_t attempts = 0;    // over committed + given up + abandoned
  double p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, mean_ms = 0;
};

struct Summary {
  double window_start_s = 0, window_end_s = 0;
  double throughput_tps = 0;      // committed txns completing inside the window / window length
  ClassSummary irt, crt, all;
  uint64_t aborted_attempts = 0;  // attempts that aborted (retries + give-ups; not an abandoned one's last)
};

// Window = [warmup, duration - cooldown]. Latency percentiles use committed
// txns that *started* in the window; throughput counts commits that
// *completed* in it.
Summary summarize(const std::vector<TxnRecord>& recs, double duration_s, double warmup_s,
                  double cooldown_s);
std::string summary_json(const Summary& s);
// CSV with header: txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session,sent_us; status:
// committed, given_up or abandoned
std::string records_csv(const std::vector<TxnRecord>& recs,
                        const std::vector<std::string>& type_names);

}  // namespace txn
