// Generic closed-loop client process: n_concurrent coordinators, zero think
// time, one outstanding transaction each. Protocol specifics are delegated
// to a ClientDriver. Pure state machine (runs under the gRPC runtime and
// under the simulator alike).
#pragma once
#include <functional>
#include <memory>
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
  TimeUs run_start_us() const { return start_us_; }
  // Called once per finished transaction (committed or given up), in the order
  // of records(): what the checker needs to know about it (docs/checker.md).
  using TxnSink = std::function<void(const TxnLogEntry&)>;
  void set_txn_sink(TxnSink sink) { sink_ = std::move(sink); }

 private:
  struct Slot {
    bool busy = false;
    TxnRequest txn;
    TimeUs first_start = 0;
    uint32_t attempts = 0;
    std::vector<uint64_t> failed;   // ids of earlier attempts
  };
  void issue(Env& env, uint32_t slot);
  void record(Slot& s, TimeUs end_us, bool committed, const Vars* outputs);
  void finish_attempt(Env& env, const ClientDriver::Outcome& o);
  void maybe_finish(Env& env);

  const Deployment& d_;
  NodeId self_;
  const Workload& w_;
  std::unique_ptr<ClientDriver> driver_;
  std::vector<Slot> slots_;
  std::vector<TxnRecord> records_;
  TxnSink sink_;
  uint64_t next_seq_ = 1;
  TimeUs start_us_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
};

}  // namespace txn
