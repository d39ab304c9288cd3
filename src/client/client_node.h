// Generic client process: n_concurrent coordinators, one outstanding transaction each. Closed loop (the default):
// zero think time, a coordinator issues its next transaction when its last one finished. Open loop
// (client.rate_tps > 0): transactions arrive at that rate (Poisson), wait in arrival order for a free coordinator
// (at most client.max_outstanding running or waiting; arrivals beyond it are shed and counted), and each one's
// latency counts from its arrival. Protocol specifics are delegated to a ClientDriver. Pure state machine (runs
// under the gRPC runtime and under the simulator alike).
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "metrics.h"
#include "protocol.h"

namespace txn {

class ClientNode : public Node {
 public:
  ClientNode(const Deployment& d, NodeId self, const Workload& w,
             std::unique_ptr<ClientDriver> driver);
  void start(Env& env) override;
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return finished_; }

  // Duration elapsed and every outstanding transaction finished (or the drain
  // timeout passed; those are recorded as given up with committed=false).
  bool finished() const { return finished_; }
  const std::vector<TxnRecord>& records() const { return records_; }
  // Open loop: what became of the arrivals. An arrival is run (a record), shed (client.max_outstanding running or
  // waiting when it came) or unsent (still waiting for a coordinator when the drain timeout passed). "window":
  // of those, the arrivals in the measurement window [warmup_s, duration_s - cooldown_s) of the run start.
  struct OpenLoopStats {
    uint64_t arrivals = 0, shed = 0, unsent = 0;
    uint64_t arrivals_window = 0, shed_window = 0, unsent_window = 0;
    uint64_t max_queued = 0;   // the most arrivals that waited for a coordinator at once
  };
  bool open_loop() const { return d_.client.open_loop(); }
  const OpenLoopStats& open_loop_stats() const { return ol_; }
  // Open loop: {"rate_tps", "max_outstanding", "arrivals", "shed", "unsent", "arrivals_in_window", ...} for the
  // client's summary.json (testbed/analysis/results.py sums them over the clients).
  std::string open_loop_json() const;
  TimeUs run_start_us() const { return start_us_; }
  // Called once per finished transaction (committed or given up), in the order
  // of records(): what the checker needs to know about it (docs/checker.md).
  using TxnSink = std::function<void(const TxnLogEntry&)>;
  void set_txn_sink(TxnSink sink) { sink_ = std::move(sink); }

 private:
  struct Slot {
    bool busy = false;
    TxnRequest txn;
    TimeUs first_start = 0;         // intended start: the issue (closed loop), the arrival (open loop)
    TimeUs sent = 0;                // the first attempt's submit (open loop: after its wait for this slot)
    uint32_t attempts = 0;
    std::vector<uint64_t> failed;   // ids of earlier attempts
    uint64_t drawn = 0;             // closed loop: transactions this slot generated
    std::unique_ptr<std::mt19937_64> draws;   // closed loop: the slot's stream, its transactions drawn in turn
    bool backing_off = false;       // an aborted attempt's retry waits out its backoff (client.retry_backoff_ms)
    std::pair<uint32_t, uint64_t> key;   // what drew its transaction (a stream's purpose and number): its retries'
  };
  // Open loop: an arrival, its intended start and its transaction (drawn as it arrived).
  struct Arrival {
    TimeUs at = 0;
    TxnRequest txn;
    uint64_t n = 0;                 // its number among the client's arrivals
  };
  // arrival: open loop's; none: closed loop's next transaction of the slot, its start read as it is sent.
  void issue(Env& env, uint32_t slot, std::optional<Arrival> arrival = std::nullopt);
  // The context of coordinator (terminal) `terminal` of this client; its transaction's random stream.
  ClientContext context(uint32_t terminal) const;
  std::mt19937_64 stream(uint32_t purpose, uint64_t a = 0, uint64_t b = 0) const;
  // How long the retry of slot s's transaction waits (0: at once; client.retry_backoff_ms).
  TimeUs retry_backoff_us(const Slot& s) const;
  // abandoned: still in flight when the drain timeout ran out (not committed; its outcome is unknown).
  void record(Slot& s, TimeUs end_us, bool committed, const Vars* outputs,
              const google::protobuf::RepeatedPtrField<ShardCopies>* stored = nullptr, bool abandoned = false);
  void finish_attempt(Env& env, const ClientDriver::Outcome& o);
  void maybe_finish(Env& env);
  // Open loop.
  void arrivals(Env& env);             // every arrival due by now, then the timer of the next
  void arrive(Env& env, TimeUs at);    // one arrival, intended to start at `at` (monotonic)
  double next_gap_us();                // an exponential inter-arrival time
  bool in_window(TimeUs at) const;

  const Deployment& d_;
  NodeId self_;
  const Workload& w_;
  std::unique_ptr<ClientDriver> driver_;
  std::vector<Slot> slots_;
  std::vector<TxnRecord> records_;
  TxnSink sink_;
  uint64_t next_seq_ = 1;
  TimeUs start_us_ = 0;
  // Open loop: the next arrival in us since start_us_ (fractional: rounding every gap would bias a high rate), the
  // arrivals waiting for a coordinator (their intended starts, oldest first), the free slots, the counts.
  // Randomness: one stream per purpose, from the run's seed and this client (stream()): the inter-arrival gaps here;
  // the transactions of a slot drawn in turn from the slot's stream (closed loop), or each from a stream named by its
  // arrival's number (open loop). So the same seed gives the same arrivals and transactions whatever the timing.
  std::mt19937_64 gaps_;
  uint32_t shard_index_ = 0;   // this client's index among the clients of its home shard
  double next_arrival_us_ = 0;
  std::deque<Arrival> queued_;
  std::vector<uint32_t> free_;
  uint32_t busy_ = 0;
  OpenLoopStats ol_;
  bool stopping_ = false;
  bool finished_ = false;
};

}  // namespace txn
