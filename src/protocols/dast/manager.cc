// DAST region manager: anticipates a CRT's timestamp for its region and
// fans the CRT out to the region's sites (docs/protocols/dast.md).
#include <set>

#include "protocols/dast/dast.h"

namespace txn::dast {

Manager::Manager(const Deployment& d, NodeId self)
    : d_(d), opts_(d), self_(self), region_(d.node(self).region) {}

void Manager::on_message(Env& env, Envelope& msg) {
  if (!msg.has_dast()) throw BadMessage("dast manager got a non-DAST message");
  auto& m = *msg.mutable_dast();
  if (m.has_prepare_crt()) {
    auto& p = *m.mutable_prepare_crt();
    TxnShape shape = analyze(d_, opts_, p.txn(), nullptr);
    if (!shape.regions.count(region_)) throw BadMessage("PrepareCRT for a region the txn does not touch");
    if (p.anticipate_us() < 0 || p.anticipate_us() > 60'000'000)
      throw BadMessage("PrepareCRT anticipation out of range");
    Ts src = from_proto(p.src());
    // Anticipated timestamp: about when the decision will reach this region.
    Ts tr{src.t + p.anticipate_us(), 0, self_};
    if (tr <= last_) tr = Ts{last_.t + 1, 0, self_};
    last_ = tr;
    const uint64_t id = p.txn().txn_id();
    Live& live = live_[id];
    live.tr = tr;
    std::set<uint32_t> touched(shape.shards.begin(), shape.shards.end());
    size_t copies = 0;   // the last replica to store it takes the request
    for (uint32_t s : touched) copies += d_.region_of_shard(s) == region_ ? d_.replicas_of(s).size() : 0;
    for (uint32_t k = 0; k < d_.shards_per_region; ++k) {
      uint32_t shard = region_ * d_.shards_per_region + k;
      for (NodeId r : d_.replicas_of(shard)) {
        Envelope e;
        const bool leads = d_.node(r).replica == 0;   // only a shard's leader orders by clocks
        if (touched.count(shard)) {
          auto* s = e.mutable_dast()->mutable_store_crt();
          if (--copies) *s->mutable_txn() = p.txn();
          else *s->mutable_txn() = std::move(*p.mutable_txn());
          *s->mutable_tr() = to_proto(tr);
          s->set_coordinator(p.coordinator());
          s->set_output_replica(p.output_replica());
          s->set_region(region_);
          if (leads) live.touched.push_back(r);
        } else {
          if (!leads) continue;
          auto* n = e.mutable_dast()->mutable_noti_crt();
          n->set_txn_id(id);
          *n->mutable_tr() = to_proto(tr);
          live.untouched.push_back(r);
        }
        env.send(r, std::move(e));
      }
    }
    return;
  }
  if (m.has_noti_wait()) {
    const auto& w = m.noti_wait();
    auto it = live_.find(w.txn_id());
    if (w.release()) {
      // A shard got its cross-region inputs: every site may pass D again.
      for (NodeId s : d_.sites_of_region(region_)) {
        if (d_.node(s).replica != 0) continue;   // followers execute in their leader's order
        Envelope e;
        auto* n = e.mutable_dast()->mutable_noti_commit();
        n->set_txn_id(w.txn_id());
        *n->mutable_decision() = w.decision();
        n->set_release(true);
        env.send(s, std::move(e));
      }
      if (it != live_.end()) {
        if (it->second.decided) live_.erase(it);
        else it->second.released = true;  // the decision is still on its way here
      }
      return;
    }
    if (it == live_.end()) throw BadMessage("NotiWait for unknown txn");
    Live& live = it->second;
    if (live.decided) throw BadMessage("second decision for txn " + std::to_string(w.txn_id()));
    live.decided = true;
    // The decision reaches every site of the region from here, over intra-region
    // links, so the sites learn it at about the same time.
    for (NodeId r : live.touched) {
      Envelope e;
      auto* de = e.mutable_dast()->mutable_dist_exe();
      de->set_txn_id(w.txn_id());
      *de->mutable_decision() = w.decision();
      env.send(r, std::move(e));
    }
    for (NodeId s : live.untouched) {
      Envelope e;
      auto* n = e.mutable_dast()->mutable_noti_commit();
      n->set_txn_id(w.txn_id());
      *n->mutable_tr() = to_proto(live.tr);
      *n->mutable_decision() = w.decision();
      n->set_need_input_wait(w.need_input_wait());
      env.send(s, std::move(e));
    }
    // Each handler of the region sends its clock to the touched replicas once it
    // is past D, so they need not ask for it (FIFO: after the decision above).
    for (uint32_t k = 0; k < d_.shards_per_region; ++k) {
      NodeId h = handler_of(d_, region_ * d_.shards_per_region + k);
      Envelope e;
      auto* cw = e.mutable_dast()->mutable_clock_want();
      *cw->mutable_t() = w.decision();
      for (NodeId r : live.touched)
        if (r != h) cw->add_notify(r);
      if (cw->notify().empty()) continue;
      env.send(h, std::move(e));
    }
    if (!w.need_input_wait() || live.released) live_.erase(it);
    return;
  }
  throw BadMessage("DAST message not for a manager");
}

}  // namespace txn::dast
