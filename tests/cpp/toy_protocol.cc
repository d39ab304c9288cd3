// A toy protocol that proves the plug-in contract (docs/adding-a-protocol.md):
// it touches only what a protocol may touch (its code, src/proto/toy.proto,
// one Envelope field) and registers itself at run time through the registry
// API, instead of a line in src/protocols/protocols.inc, so that only the unit
// tests carry it. Being registered, it gets the whole protocol-neutral
// simulation suite (test_protocol_sim.cc).
//
// The protocol: one sequencer (a group role of one member) orders every
// transaction. For each shard the transaction touches it sends the
// transaction, numbered in that shard's order, to the shard's replicas. A
// replica executes its shard's transactions strictly in that order, each piece
// as soon as its inputs are known, and sends the values a piece produces to
// the same-numbered replica of the shards whose pieces need them. The orders
// of all shards are cut from one global order, so the execution is
// serializable and cannot deadlock: a transaction waits only for values of
// pieces of its own, which no later transaction can hold up.
//
// The replicas of the shards that touch a transaction report, with Done, the
// values their pieces produced; the sequencer answers the client with all of
// them (what the client records as the transaction's outputs).
#include "toy_protocol.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace txn::toy {
namespace {

constexpr const char* kSequencer = "sequencer";
constexpr TimeUs kHoldUs = 20'000;  // Fault::SwapPairsAtShard0: how long an order waits for a partner

NodeId sequencer_of(const Deployment& d) { return d.role_nodes(kSequencer).at(0); }

class Replica : public ReplicaNode {
 public:
  Replica(const Deployment& d, NodeId self, const Workload& w)
      : d_(d), me_(d.node(self)), exec_(w, me_.shard),
        acks_(static_cast<uint32_t>(protocol_options(d).integer("acks"))) {}
  void start(Env&) override {}
  void on_timer(Env&, uint64_t) override {}
  bool idle() const override { return orders_.empty(); }
  const ShardExecutor& executor() const override { return exec_; }

  void on_message(Env& env, Envelope& msg) override {
    if (!msg.has_toy()) throw BadMessage("toy replica got a non-toy message");
    const auto& m = msg.toy();
    if (m.has_order()) {
      if (m.order().seq() < next_ || !orders_.emplace(m.order().seq(), m.order().txn()).second)
        throw BadMessage("order " + std::to_string(m.order().seq()) + " seen before");
    } else if (m.has_values()) {
      Vars& known = vars_[m.values().txn_id()];
      for (const auto& [k, v] : m.values().vars()) known[k] = v;
    } else {
      throw BadMessage("toy message not for a replica");
    }
    run(env);
  }

 private:
  // Executes the transactions next in this shard's order, as far as their inputs allow.
  void run(Env& env) {
    for (auto it = orders_.find(next_); it != orders_.end(); it = orders_.find(next_)) {
      const TxnRequest& t = it->second;
      Vars& known = vars_[t.txn_id()];
      for (bool progress = true; progress;) {
        progress = false;
        for (const auto& p : t.pieces())
          if (p.shard() == me_.shard && !done_.count(p.id()) && ready(p, known)) {
            execute(env, t, p, known);
            progress = true;
          }
      }
      for (const auto& p : t.pieces())
        if (p.shard() == me_.shard && !done_.count(p.id())) return;  // waits for a value
      if (me_.replica < acks_) {
        Envelope e;
        auto* done = e.mutable_toy()->mutable_done();
        done->set_txn_id(t.txn_id());
        for (const auto& p : t.pieces())
          if (p.shard() == me_.shard)
            for (const auto& v : p.outputs())
              if (known.count(v)) (*done->mutable_vars())[v] = known.at(v);
        env.send(sequencer_of(d_), std::move(e));
      }
      vars_.erase(t.txn_id());
      done_.clear();
      orders_.erase(it);
      ++next_;
    }
  }

  static bool ready(const Piece& p, const Vars& known) {
    for (const auto& v : p.inputs())
      if (!known.count(v)) return false;
    return true;
  }

  void execute(Env& env, const TxnRequest& t, const Piece& p, Vars& known) {
    Vars in = p.args(), out;
    for (const auto& v : p.inputs()) in[v] = known.at(v);
    exec_.execute(t.txn_id(), p, in, &out);
    done_.insert(p.id());
    for (const auto& [k, v] : out) known[k] = v;
    if (out.empty()) return;
    std::set<uint32_t> consumers;  // other shards with a piece that needs one of these values
    for (const auto& q : t.pieces())
      for (const auto& v : q.inputs())
        if (q.shard() != me_.shard && out.count(v)) consumers.insert(q.shard());
    for (uint32_t s : consumers) {
      Envelope e;
      auto* m = e.mutable_toy()->mutable_values();
      m->set_txn_id(t.txn_id());
      *m->mutable_vars() = out;
      env.send(d_.replica_id(s, me_.replica), std::move(e));
    }
  }

  const Deployment& d_;
  const NodeInfo& me_;
  ShardExecutor exec_;
  const uint32_t acks_;
  std::map<uint64_t, TxnRequest> orders_;       // by place in this shard's order
  uint64_t next_ = 1;                           // the place executing now
  std::unordered_map<uint64_t, Vars> vars_;     // txn id -> values known (they may come before the order)
  std::set<uint32_t> done_;                     // executed pieces of the transaction at next_
};

class Sequencer : public Node {
 public:
  Sequencer(const Deployment& d, NodeId, Fault fault)
      : d_(d), acks_(static_cast<uint32_t>(protocol_options(d).integer("acks"))),
        swap_pairs_(fault == Fault::SwapPairsAtShard0) {}
  void start(Env&) override {}
  void on_timer(Env& env, uint64_t id) override {
    // Fault::SwapPairsAtShard0: no partner came for the held transaction; it goes alone.
    if (held_ && id == hold_timer_) {
      order(env, 0, *held_);
      held_.reset();
    }
  }
  bool idle() const override { return waiting_.empty(); }
  uint64_t swapped() const { return swapped_; }

  void on_message(Env& env, Envelope& msg) override {
    if (msg.has_submit()) {
      const TxnRequest& t = msg.submit().txn();
      std::set<uint32_t> shards;
      for (const auto& p : t.pieces()) {
        if (p.shard() >= d_.n_shards()) throw BadMessage("piece shard " + std::to_string(p.shard()) + " out of range");
        shards.insert(p.shard());
      }
      if (shards.empty()) throw BadMessage("txn " + std::to_string(t.txn_id()) + " has no pieces");
      if (!waiting_.emplace(t.txn_id(), Waiting{msg.from(), static_cast<uint32_t>(shards.size()) * acks_, {}}).second)
        throw BadMessage("txn " + std::to_string(t.txn_id()) + " submitted twice");
      for (uint32_t s : shards) {
        if (swap_pairs_ && s == 0) swap_at_shard_0(env, t);
        else order(env, s, t);
      }
      return;
    }
    if (!msg.has_toy() || !msg.toy().has_done()) throw BadMessage("toy sequencer expects submissions and Done");
    auto it = waiting_.find(msg.toy().done().txn_id());
    if (it == waiting_.end()) throw BadMessage("Done for unknown txn");
    for (const auto& [k, v] : msg.toy().done().vars()) it->second.outputs[k] = v;
    if (--it->second.reports > 0) return;
    Envelope e;
    e.mutable_reply()->set_txn_id(it->first);
    e.mutable_reply()->set_committed(true);
    *e.mutable_reply()->mutable_outputs() = it->second.outputs;
    env.send(it->second.client, std::move(e));
    waiting_.erase(it);
  }

 private:
  struct Waiting {
    NodeId client;
    uint32_t reports;  // Done messages still to come
    Vars outputs;      // what the reported pieces produced
  };

  // Gives `t` the next place in shard `s`'s order.
  void order(Env& env, uint32_t s, const TxnRequest& t) {
    const uint64_t seq = ++next_seq_[s];
    for (NodeId r : d_.replicas_of(s)) {
      Envelope e;
      auto* o = e.mutable_toy()->mutable_order();
      *o->mutable_txn() = t;
      o->set_seq(seq);
      env.send(r, std::move(e));
    }
  }

  // The broken variant: shard 0's order holds a transaction back until the
  // next one comes, and puts that one first when the two conflict on shard 0
  // and on another shard, where they keep the global order (a swap that
  // matters), and the later one can run at once (it needs no value from
  // another shard, so the swap cannot deadlock).
  void swap_at_shard_0(Env& env, const TxnRequest& t) {
    if (held_ && self_contained(t, 0) && conflict(*held_, t, 0) && conflict_beyond_shard_0(*held_, t)) {
      order(env, 0, t);
      order(env, 0, *held_);
      held_.reset();
      ++swapped_;
      return;
    }
    if (held_) order(env, 0, *held_);
    held_ = t;
    env.set_timer(++hold_timer_, kHoldUs);
  }

  // A piece of `a` and a piece of `b` on `shard` access a key that one of them writes.
  static bool conflict(const TxnRequest& a, const TxnRequest& b, uint32_t shard) {
    auto writes = [](const Piece& p, const std::string& k) {
      return std::find(p.write_keys().begin(), p.write_keys().end(), k) != p.write_keys().end();
    };
    for (const auto& p : a.pieces())
      for (const auto& q : b.pieces()) {
        if (p.shard() != shard || q.shard() != shard) continue;
        for (const auto& k : p.read_keys())
          if (writes(q, k)) return true;
        for (const auto& k : p.write_keys())
          if (writes(q, k) || std::find(q.read_keys().begin(), q.read_keys().end(), k) != q.read_keys().end())
            return true;
      }
    return false;
  }
  static bool conflict_beyond_shard_0(const TxnRequest& a, const TxnRequest& b) {
    std::set<uint32_t> shards;
    for (const auto& p : a.pieces())
      if (p.shard() != 0) shards.insert(p.shard());
    for (uint32_t s : shards)
      if (conflict(a, b, s)) return true;
    return false;
  }

  // Every input of t's pieces on shard `s` comes from its pieces on `s`.
  static bool self_contained(const TxnRequest& t, uint32_t s) {
    std::set<std::string> local;
    for (const auto& p : t.pieces())
      if (p.shard() == s) local.insert(p.outputs().begin(), p.outputs().end());
    for (const auto& p : t.pieces())
      if (p.shard() == s)
        for (const auto& v : p.inputs())
          if (!local.count(v)) return false;
    return true;
  }

  const Deployment& d_;
  const uint32_t acks_;
  const bool swap_pairs_;
  std::map<uint32_t, uint64_t> next_seq_;  // shard -> last place handed out
  std::unordered_map<uint64_t, Waiting> waiting_;
  std::optional<TxnRequest> held_;          // Fault::SwapPairsAtShard0: shard 0's transaction held back
  uint64_t hold_timer_ = 0;                 // the timer that releases it
  uint64_t swapped_ = 0;                    // pairs swapped
};

class Driver : public ClientDriver {
 public:
  explicit Driver(const Deployment& d) : d_(d) {}
  void submit(Env& env, const TxnRequest& txn, uint32_t attempt) override {
    Envelope e;
    *e.mutable_submit()->mutable_txn() = txn;
    e.mutable_submit()->set_attempt(attempt);
    env.send(sequencer_of(d_), std::move(e));
  }
  void on_message(Env& env, Envelope& msg) override {
    if (!msg.has_reply()) throw BadMessage("toy client expects ClientReply");
    if (done_) done_(env, Outcome{msg.reply().txn_id(), msg.reply().committed(), &msg.reply().outputs()});
  }

 private:
  const Deployment& d_;
};

}  // namespace

uint64_t swapped_pairs(const Node& sequencer) {
  const auto* s = dynamic_cast<const Sequencer*>(&sequencer);
  if (!s) throw std::logic_error("not a toy sequencer");
  return s->swapped();
}

ProtocolSpec spec(const std::string& name, Fault fault) {
  ProtocolSpec p;
  p.name = name;
  p.summary = "one sequencer orders every transaction; each shard executes in that order (a test of the contract)";
  p.min_regions = 1;
  p.roles = {{kSequencer, "q", Placement::Group, 1, "numbers every transaction in each shard's order",
              [fault](const Deployment& d, NodeId id) -> std::unique_ptr<Node> {
                return std::make_unique<Sequencer>(d, id, fault);
              }}};
  p.options = {OptionSpec::integer("acks", 1, 1, 3,
                                   "replicas of each touched shard that report completion before the client hears back")};
  p.make_replica = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<ReplicaNode> {
    return std::make_unique<Replica>(d, id, w);
  };
  p.make_client_driver = [](const Deployment& d, NodeId) -> std::unique_ptr<ClientDriver> {
    return std::make_unique<Driver>(d);
  };
  return p;
}

namespace {
// Registered before main(), so the parameterized suites, which read the
// registry when gtest starts, include it.
const bool registered = (register_protocol(spec()), true);
}  // namespace

}  // namespace txn::toy
