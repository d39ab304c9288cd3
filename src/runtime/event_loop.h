// Runs the nodes of one engine process on one thread (docs/efficiency.md):
// incoming messages, each due at a steady-clock time (the link emulation),
// and the nodes' timers. The thread waits in an Asio io_context, on a timerfd
// set for the earliest of them, so a message costs one wake-up, at the moment
// it is due: a thread that posts one earlier than that moves the timer instead
// of waking the loop. The same io_context runs the tcp transport's sockets
// (io()), so a frame received is unpacked on this thread, with no hand-off.
//
// A message between two nodes of the process never leaves it: the loop gives
// it the same emulated delay a remote one gets (the link emulator, one FIFO
// channel per sender and receiver; under netem too, as no qdisc sees it) and
// queues it in its own inbox, unencoded.
// Messages for other processes go to the sender (the transport), which the
// loop flushes once per round of work, so what the process's nodes send to
// one destination process in one round travels as one batch.
//
// RealEnv is the Env each node gets; RTT probes are answered here, when due,
// without the node.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/link_emulator.h"
#include "runtime/reactor.h"

namespace txn::runtime {

class EventLoop;

class RealEnv final : public Env {
 public:
  RealEnv(const Deployment& d, NodeId self, uint32_t index, EventLoop& loop);
  TimeUs now_us() override;    // wall clock, microseconds since the epoch
  TimeUs mono_us() override;   // steady clock
  void send(NodeId to, Envelope msg) override;
  void set_timer(uint64_t id, TimeUs delay_us) override;
  std::mt19937_64& rng() override { return rng_; }
  NodeId self() const override { return self_; }
  void log(const std::string& line) override;

 private:
  const Deployment& d_;
  NodeId self_;
  uint32_t index_;   // in the loop's nodes
  EventLoop& loop_;
  std::mt19937_64 rng_;
};

class EventLoop {
 public:
  using Sender = std::function<void(Envelope&&)>;
  using Flusher = std::function<void()>;
  // Hosts `local` (node ids, at least one). Throws std::runtime_error if no timerfd.
  EventLoop(const Deployment& d, std::vector<NodeId> local);
  EventLoop(const Deployment& d, NodeId self) : EventLoop(d, std::vector<NodeId>{self}) {}
  ~EventLoop();
  // Where messages to nodes of other processes go (normally Transport::enqueue), and what sends them on
  // (Transport::flush), called after every round of work.
  void set_sender(Sender s, Flusher f = {}) {
    sender_ = std::move(s);
    flusher_ = std::move(f);
  }
  // Thread-safe: queue a message for one of the local nodes, to be handled at `due_us`.
  void post(Envelope&& m, TimeUs due_us);
  // Start the nodes (parallel to `local`) and process events until should_stop() returns true (checked after
  // every round of events and at least every max_sleep_us, 20 ms unless set).
  void run(const std::vector<Node*>& nodes, const std::function<bool()>& should_stop);
  void run(Node& node, const std::function<bool()>& should_stop) { run(std::vector<Node*>{&node}, should_stop); }
  Env& env(size_t i = 0) { return *envs_.at(i); }
  // The longest the loop sleeps with nothing due before it checks should_stop() again (loop thread, or before
  // run()). A process whose stop comes as a signal raises it: see wake_on_signals.
  void set_max_sleep_us(TimeUs us) { max_sleep_us_ = us; }
  // The loop wakes only at the ends of the cells of this grid (steady clock, us; 0: off), so that what falls due
  // within one cell costs one wake-up: a message is delivered at the cell end nearest its due time (half a cell
  // early at most, late by less than half a cell: no later on average), a timer at the end of its cell (never
  // early: a node may count on its time having come). Each process's grid has its own phase (from its first
  // node's id), so that processes do not all wake at once.
  void set_delivery_grid_us(TimeUs us) {
    grid_us_ = std::max<TimeUs>(0, us);
    grid_phase_ = grid_us_ > 0 ? static_cast<TimeUs>(uint64_t{local_[0]} * 7919 % static_cast<uint64_t>(grid_us_))
                               : 0;
  }
  // Quiet waits (docs/efficiency.md): when the loop's next wake-up is at most `us` after its last look at its
  // sockets, it sleeps without watching them and reads them when it wakes, since nothing they bring can fall due
  // sooner: the caller sets `us` to the least emulated delay of a message into this process (min_incoming_delay_us)
  // plus half a grid cell, and only where every sender stamps its frames with this kernel's steady clock (a
  // deployment on loopback, tcp transport), as the delay then counts from the sender's write, not from the read.
  // 0 (the default) turns them off; the loop thread, or before run().
  void set_quiet_horizon_us(TimeUs us) { quiet_us_ = std::max<TimeUs>(0, us); }
  TimeUs quiet_horizon_us() const { return quiet_us_; }
  // The least delay the link model (app) can give a message from a node of another process to one of this
  // process's: 0 under netem or none, or where a jittered link reaches this process.
  TimeUs min_incoming_delay_us() const;
  TimeUs delivery_grid_us() const { return grid_us_; }
  // The end of the grid cell that holds t (t itself without a grid).
  TimeUs on_grid(TimeUs t) const {
    if (grid_us_ <= 0) return t;
    const TimeUs k = (t - grid_phase_ + grid_us_ - 1) / grid_us_;   // t > phase on the steady clock
    return k * grid_us_ + grid_phase_;
  }
  // Signals that end a wait at once, so should_stop() sees them: the caller keeps them blocked in every thread
  // (before starting any); while it runs, the loop reads them from a signalfd and calls on_signal on its own
  // thread for each (no wake-up is lost, and nothing runs in a signal handler).
  void wake_on_signals(std::vector<int> sigs, std::function<void(int)> on_signal);
  // The reactor the loop waits in: run a tcp transport on it (make_transport), from this loop's thread only.
  Reactor& reactor() { return reactor_; }
  // Load start (t = 0 of the deployment's fault plan, docs/nemesis.md) on the wall clock, in microseconds since
  // the epoch: from then on the loop's in-process channels apply the plan's partitions, spikes and jitter, and its
  // nodes' protocol clocks the plan's clock faults. Thread-safe; set once. The anchors, on the steady clock (for
  // link emulation: the transport's channels use it too) and on the wall clock:
  void set_load_start(TimeUs wall_us);
  const FaultAnchor& load_start_mono() const { return zero_mono_; }
  const FaultAnchor& load_start_wall() const { return zero_wall_; }
  bool hosts(NodeId id) const { return id < index_.size() && index_[id] != kNone; }
  // Messages a node rejected (BadMessage): logged and dropped.
  uint64_t rejected(size_t i = 0) const { return rejected_.at(i); }
  // Messages delivered inside the process, and handed to the sender.
  uint64_t local_messages() const { return local_msgs_; }
  uint64_t remote_messages() const { return remote_msgs_; }
  // Rounds of the loop (one per wake-up); of them those that delivered no message and fired no timer (a socket's
  // frames not yet due, a signal, a spurious wake-up), and those that only fired timers; and the quiet waits.
  uint64_t rounds() const { return rounds_; }
  uint64_t empty_rounds() const { return empty_rounds_; }
  uint64_t timer_rounds() const { return timer_rounds_; }
  uint64_t quiet_waits() const { return quiet_waits_; }

 private:
  friend class RealEnv;
  static constexpr uint32_t kNone = UINT32_MAX;
  using Timer = std::tuple<TimeUs, uint64_t, uint32_t, uint64_t>;  // (deadline, seq, node index, id)
  void route(Envelope&& m);   // loop thread: to a local node's inbox, or to the sender
  TimeUs next_wake();         // loop thread: when the next message or timer is due (on the grid), or max sleep
  void answer_probe(const Envelope& m);

  const Deployment& d_;
  std::vector<NodeId> local_;
  std::vector<uint32_t> index_;   // node id -> index in local_, kNone for nodes of other processes
  Sender sender_;
  Flusher flusher_;
  std::vector<std::unique_ptr<RealEnv>> envs_;
  FaultAnchor zero_mono_, zero_wall_;               // load start; declared before channels_, which point to them
  LinkChannels channels_;                          // in-process messages; loop thread only, as is link_rng_
  std::mt19937_64 link_rng_;
  Reactor reactor_;
  TimeUs max_sleep_us_ = 20'000;
  TimeUs grid_us_ = 0, grid_phase_ = 0;
  TimeUs quiet_us_ = 0;
  // When the loop wakes for a message due at `due`: the cell end nearest it (see set_delivery_grid_us).
  TimeUs message_wake(TimeUs due) const { return on_grid(due - grid_us_ / 2); }
  std::vector<int> wake_signals_;
  std::function<void(int)> on_signal_;
  std::mutex mu_;
  std::map<std::pair<TimeUs, uint64_t>, Envelope> inbox_;   // (due, arrival order)
  uint64_t inbox_seq_ = 0;
  bool sleeping_ = false;      // the loop waits in its reactor
  TimeUs armed_ = 0;           // until when it waits
  bool in_run_ = false;        // run() is on; with loop_thread_, under mu_
  std::thread::id loop_thread_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;  // loop thread only
  uint64_t timer_seq_ = 0;
  std::vector<uint64_t> rejected_;   // loop thread only
  uint64_t local_msgs_ = 0, remote_msgs_ = 0;
  uint64_t rounds_ = 0, empty_rounds_ = 0, timer_rounds_ = 0, quiet_waits_ = 0;
};

}  // namespace txn::runtime
