// DAST replica (docs/protocols/dast.md): the node (Replica) routes each message to one of its two roles, the Site
// (a timestamp-ordered executor of its shard, below "replica: storing and ordering" and "execution") and, at replica
// 0, the Coordinator of its clients' transactions ("handler / coordinator").
#include <algorithm>
#include <sstream>

#include "check.h"
#include "protocols/dast/dast.h"
#include "protocols/dast/mutant.h"

namespace txn::dast {
namespace {
constexpr uint64_t kSyncTimer = 1;
constexpr uint64_t kWantTimer = 2;
constexpr TimeUs kReleaseMemoryUs = 30'000'000;
// Counter-proposals sit this many logical ticks above the clock: a frozen clock
// ticks once per fresh() call, far fewer times than this while a CRT is pending.
constexpr int64_t kProposalGap = int64_t{1} << 32;

template <class T>
std::string str(const T& x) {
  std::ostringstream o;
  o << x;
  return o.str();
}
}  // namespace

bool deferrable(const Options& o, const Workload& w, const Piece& p) {
  return o.defer_commutative && p.outputs().empty() && w.commutes(p);
}

TxnShape analyze(const Deployment& d, const Options& o, const TxnRequest& txn, const Workload* w) {
  if (txn.pieces().empty()) throw BadMessage("txn " + str(txn.txn_id()) + " has no pieces");
  TxnShape s;
  std::map<std::string, uint32_t> producer;  // variable -> producing shard
  std::set<uint32_t> shards;
  for (const auto& p : txn.pieces()) {
    if (p.shard() >= d.n_shards())
      throw BadMessage("txn " + str(txn.txn_id()) + ": piece shard " + str(p.shard()) +
                       " out of range (" + str(d.n_shards()) + " shards)");
    shards.insert(p.shard());
    s.regions.insert(d.region_of_shard(p.shard()));
    for (const auto& v : p.outputs()) producer[v] = p.shard();
  }
  if (txn.home_shard() >= d.n_shards() || !shards.count(txn.home_shard()))
    throw BadMessage("txn " + str(txn.txn_id()) + ": home shard " + str(txn.home_shard()) +
                     " is not touched by its pieces");
  std::set<uint32_t> producer_regions;  // regions that feed a region holding D
  for (const auto& p : txn.pieces()) {
    const bool defers = w != nullptr && deferrable(o, *w, p);
    for (const auto& v : p.inputs()) {
      auto it = producer.find(v);
      if (it == producer.end())
        throw BadMessage("txn " + str(txn.txn_id()) + ": input '" + v + "' has no producer");
      uint32_t from = d.region_of_shard(it->second), to = d.region_of_shard(p.shard());
      if (from != to && !defers) {
        s.wait_regions.insert(to);
        s.input_shards.insert(p.shard());
        producer_regions.insert(from);
      }
    }
  }
  // Two regions holding D, each for a value the other produces at D, would wait forever.
  for (uint32_t r : s.wait_regions)
    if (producer_regions.count(r))
      throw BadMessage("txn " + str(txn.txn_id()) +
                       ": cross-region value dependencies in both directions are not supported");
  s.shards.assign(shards.begin(), shards.end());
  return s;
}

Role::Role(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : RoleContext(d, self, w, q), opts_(o) {
  for (NodeId s : d.sites_of_region(me_.region)) {
    if (s == self) continue;
    if (d.node(s).replica == 0) region_handlers_.push_back(s);
  }
}

Site::Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : Role(d, self, w, o, q), exec_(w, d.node(self).shard), clock_(self) {
  if (leader())
    for (NodeId r : d.replicas_of(me_.shard))
      if (r != self) followers_.push_back(r);
}

Coordinator::Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q,
                         Site& site)
    : Role(d, self, w, o, q), site_(site), clock_(site.clock()) {
  const auto& rtt = d.link.rtt_ms;
  for (uint32_t r = 0; r < d.regions; ++r) {
    double prior = 100'000;
    if (rtt.size() == d.regions)
      prior = (rtt[me_.region][r] + rtt[r][r] / 2) * 1000;
    rtt_.emplace_back(prior, opts_.ewma_alpha, opts_.held_sample_factor);
  }
}

Replica::Replica(const Deployment& d, NodeId self, const Workload& w)
    : opts_(d), self_q_(self), site_(d, self, w, opts_, self_q_), coord_(d, self, w, opts_, self_q_, site_),
      sync_interval_us_(static_cast<TimeUs>(opts_.sync_interval_ms * 1000)) {}

void Replica::start(Env& env) {
  env.set_timer(kSyncTimer, sync_interval_us_);
}

std::map<std::string, int64_t> Site::counters() const {
  return {{"irts", n_irts_}, {"irts_behind_undecided_crt", n_irts_behind_crt_},
          {"counter_proposals", n_counter_proposals_}};
}

uint64_t Coordinator::held_delay_samples() const {
  uint64_t n = 0;
  for (const auto& e : rtt_) n += e.held();
  return n;
}

std::map<std::string, int64_t> Replica::counters() const {
  auto out = site_.counters();
  out["held_delay_samples"] = static_cast<int64_t>(coord_.held_delay_samples());
  return out;
}

void Replica::on_timer(Env& env, uint64_t id) {
  if (id == kSyncTimer) env.set_timer(kSyncTimer, sync_interval_us_);
  site_.on_timer(env, id);
  drain_local(env);
}

void Site::on_timer(Env& env, uint64_t id) {
  if (id == kWantTimer && env.now_us() >= wake_at_) wake_at_ = 0;
  if (id == kSyncTimer) {
    TimeUs now = env.mono_us();
    for (auto it = released_.begin(); it != released_.end();)
      it = now - it->second > kReleaseMemoryUs ? released_.erase(it) : std::next(it);
  }
  try_execute(env);
}

// Clock sync on demand: a peer blocked on our clock asked for it (ClockWant);
// answer as soon as our clock is above what it waits for.
void Site::serve_wants(Env& env) {
  if (wanted_.empty()) return;
  Ts clock = clock_.fresh(env.now_us());
  for (auto it = wanted_.begin(); it != wanted_.end();) {
    auto& ts = it->second;
    if (ts.empty() || !(*ts.begin() < clock)) {
      it = ts.empty() ? wanted_.erase(it) : std::next(it);
      continue;
    }
    Envelope e;
    *e.mutable_dast()->mutable_ir_sync()->mutable_clock() = to_proto(clock);
    env.send(it->first, std::move(e));
    ts.erase(ts.begin(), ts.lower_bound(clock));  // everything below our clock is answered
    it = ts.empty() ? wanted_.erase(it) : std::next(it);
  }
  for (const auto& [peer, ts] : wanted_) wake_when_past(env, *ts.begin());
}

// Our clock passes `t` at a known physical moment unless a pending CRT
// stretches it below t (then its resolution, a message, is what moves it):
// look again at that moment.
void Site::wake_when_past(Env& env, const Ts& t) {
  const Ts* pending = clock_.min_pending();
  if (pending != nullptr && *pending <= t) return;
  const TimeUs now = env.now_us();
  const TimeUs at = t.t - clock_.offset() + 1;  // physical time at which now + offset > t.t
  if (at <= now) return;                        // passed already (or within this microsecond)
  if (wake_at_ > now && wake_at_ <= at) return; // a timer that early is set
  wake_at_ = at;
  env.set_timer(kWantTimer, at - now);
}

void Site::on_clock_want(Env& env, NodeId from, const ::dast::ClockWant& m) {
  // A coordinator in another region may ask on behalf of our replicas; only
  // a peer of this region may ask for itself or pass its clock.
  if (d_.node(from).region == me_.region) {
    if (m.has_clock()) observe(env, from, from_proto(m.clock()));
  } else if (m.notify().empty()) {
    throw BadMessage("ClockWant from another region without recipients");
  }
  Ts t = from_proto(m.t());
  // A timestamp that exists already (not in the future) and orders below every
  // CRT pending here: move the clock past it now. A stretched clock would
  // otherwise pass it only once the pending CRT resolves, though nothing needs
  // that (e.g. a counter-proposal just above another site's frozen clock).
  // Only below the pending CRTs' microsecond: the timestamps issued next bump
  // t's counter, and in that microsecond they would order after a pending CRT.
  const Ts* pending = clock_.min_pending();
  if (t.t <= env.now_us() + clock_.offset() && (pending == nullptr || t.t < pending->t))
    clock_.observe(t, env.now_us());
  std::vector<NodeId> dests(m.notify().begin(), m.notify().end());
  if (dests.empty()) dests.push_back(from);
  for (NodeId n : dests) {
    if (n >= d_.nodes.size() || d_.node(n).region != me_.region || n == self_)
      throw BadMessage("ClockWant names node " + str(n) + ", not a peer in this region");
  }
  for (NodeId n : dests) wanted_[n].insert(t);
  try_execute(env);  // serves the wants, and sets a timer for those in our future
}

void Replica::on_message(Env& env, Envelope& msg) {
  dispatch(env, msg);
  drain_local(env);
}

void Replica::drain_local(Env& env) {
  self_q_.drain(env, [&](Envelope& m) { dispatch(env, m); });
}

void Replica::dispatch(Env& env, Envelope& msg) {
  NodeId from = msg.from();
  if (msg.has_submit()) return coord_.on_submit(env, from, *msg.mutable_submit());
  if (!msg.has_dast()) throw BadMessage("dast replica got a non-DAST message");
  auto& m = *msg.mutable_dast();
  switch (m.m_case()) {
    case ::dast::Msg::kStoreIrt: return site_.on_store_irt(env, from, *m.mutable_store_irt());
    case ::dast::Msg::kStoreIrtAck: return coord_.on_store_irt_ack(env, from, m.store_irt_ack());
    case ::dast::Msg::kStoreCrt: return site_.on_store_crt(env, from, *m.mutable_store_crt());
    case ::dast::Msg::kNotiCrt: return site_.on_noti_crt(env, m.noti_crt());
    case ::dast::Msg::kRemotePrepared: return coord_.on_remote_prepared(env, m.remote_prepared());
    case ::dast::Msg::kDistExe: return site_.on_dist_exe(env, m.dist_exe());
    case ::dast::Msg::kNotiCommit: return site_.on_noti_commit(env, m.noti_commit());
    case ::dast::Msg::kSendOutput: return site_.on_send_output(env, m.send_output());
    case ::dast::Msg::kPieceResult: return coord_.on_piece_result(env, from, m.piece_result());
    case ::dast::Msg::kIrSync: return site_.on_sync(env, from, m.ir_sync());
    case ::dast::Msg::kClockWant: return site_.on_clock_want(env, from, m.clock_want());
    case ::dast::Msg::kExecuted: return site_.on_executed(env, from, m.executed());
    default: throw BadMessage("DAST message without a body or not for a replica");
  }
}

void Site::observe(Env& env, NodeId from, const Ts& ts) {
  if (from != self_) {
    Ts& k = known_clock_[from];
    if (k < ts) k = ts;
  }
  clock_.observe(ts, env.now_us());
}

void Site::set_phase(Entry& e, Phase to) {
  transition(e.txn.txn_id(), e.phase, to, {{Phase::Undecided, Phase::Queued}, {Phase::Queued, Phase::Deferred}});
}

Site::Entry& Site::add_entry(TxnRequest&& txn, TxnShape shape, const Ts& ts, Phase phase,
                                   NodeId coordinator, uint32_t output_replica) {
  TXN_CHECK(phase == Phase::Undecided || phase == Phase::Queued, "a new entry is undecided or queued");
  const uint64_t id = txn.txn_id();
  if (entries_.count(id)) throw BadMessage("duplicate txn " + str(id));
  Entry& e = entries_[id];
  e.txn = std::move(txn);
  e.shape = std::move(shape);
  e.ts = ts;
  e.phase = phase;
  e.coordinator = coordinator;
  e.output_replica = output_replica;
  if (auto it = early_vars_.find(id); it != early_vars_.end()) {
    e.vars = it->second;
    early_vars_.erase(it);
  }
  const QueueKey key{ts, id};
  if (phase == Phase::Undecided) {
    undecided_.insert(key);  // a CRT: queued for execution once its decision arrives
  } else if (me_.replica == output_replica) {
    // An IRT, counted once per touched shard: queued above an undecided CRT it
    // waits for that CRT's decision (the stretch exists to make this rare).
    ++n_irts_;
    if (!undecided_.empty() && *undecided_.begin() < key) ++n_irts_behind_crt_;
  }
  queue_[key] = id;
  return e;
}

void Site::store_own_irt(TxnRequest&& txn, TxnShape shape, const Ts& ts) {
  add_entry(std::move(txn), std::move(shape), ts, Phase::Queued, self_, me_.replica);
}

void Site::clocks_requested(const Ts& ts) {
  for (NodeId h : region_handlers_) asked_[h].insert(ts);
}

void Site::rekey(Entry& e, const Ts& ts) {
  queue_.erase({e.ts, e.txn.txn_id()});
  e.ts = ts;
  queue_[{ts, e.txn.txn_id()}] = e.txn.txn_id();
}

// ---- handler / coordinator ---------------------------------------------------

void Coordinator::on_submit(Env& env, NodeId from, ClientSubmit& m) {
  const TxnRequest& req = m.txn();
  if (req.home_shard() != me_.shard)
    throw BadMessage("txn " + str(req.txn_id()) + " submitted to shard " + str(me_.shard) +
                     " but its home shard is " + str(req.home_shard()));
  if (self_ != handler_of(d_, me_.shard))
    throw BadMessage("txn " + str(req.txn_id()) + " submitted to " + me_.name +
                     ", which is not its shard's handler (replica 0)");
  if (coords_.count(req.txn_id())) throw BadMessage("duplicate submit of txn " + str(req.txn_id()));
  TxnShape shape = analyze(d_, opts_, req, &w_);
  Coord& c = coords_[req.txn_id()];
  // The submit's request goes out in the coordinator's messages (the last of them takes it): the coordinator keeps
  // only its id and home shard.
  TxnRequest txn = std::move(*m.mutable_txn());
  c.txn_id = txn.txn_id();
  c.home_shard = txn.home_shard();
  c.shape = shape;
  c.client = from;
  const bool crt = shape.regions.size() > 1 || *shape.regions.begin() != me_.region;
  c.phase = crt ? Phase::Preparing : Phase::Irt;
  if (!crt) {
    Ts ts = clock_.fresh(env.now_us());
    Ts after = clock_.fresh(env.now_us());
    c.acks[me_.shard] = 1u << me_.replica;  // the handler stores it itself
    bool own = false;
    for (uint32_t s : shape.shards) {
      for (NodeId r : d_.replicas_of(s)) {
        if (r == self_) {
          own = true;   // stored below, where it takes the request
          continue;
        }
        Envelope e;
        auto* st = e.mutable_dast()->mutable_store_irt();
        *st->mutable_txn() = txn;
        *st->mutable_ts() = to_proto(ts);
        st->set_handler(self_);
        st->set_output_replica(me_.replica);
        *st->mutable_clock() = to_proto(after);
        post(env, r, std::move(e));
      }
    }
    // In parallel, ask the region's other handlers to send their clocks
    // straight to the replicas that will wait for them.
    for (NodeId h : region_handlers_) {
      Envelope e;
      auto* w = e.mutable_dast()->mutable_clock_want();
      *w->mutable_t() = to_proto(ts);
      *w->mutable_clock() = to_proto(after);
      for (uint32_t s : shape.shards)   // the shards' leaders: only they execute by clocks
        if (handler_of(d_, s) != h) w->add_notify(handler_of(d_, s));
      post(env, h, std::move(e));
    }
    if (own) site_.store_own_irt(std::move(txn), std::move(shape), ts);
    site_.clocks_requested(ts);
    site_.try_execute(env);
    return;
  }
  // Anticipation counts from the physical clock: while the region is stretched
  // the logical clock lags it, and a T_r computed from that would already be in
  // the past at the remote replicas (forcing counter-proposals).
  Ts src = clock_.fresh(env.now_us());
  src.t = std::max(src.t, env.now_us() + clock_.offset());
  TimeUs now = env.mono_us();
  size_t left = shape.regions.size();
  for (uint32_t region : shape.regions) {
    Envelope e;
    auto* p = e.mutable_dast()->mutable_prepare_crt();
    if (--left) *p->mutable_txn() = txn;
    else *p->mutable_txn() = std::move(txn);
    *p->mutable_src() = to_proto(src);
    p->set_anticipate_us(static_cast<int64_t>(anticipate_us(c, region)));
    p->set_coordinator(self_);
    p->set_output_replica(me_.replica);
    c.prepare_sent[region] = now;
    post(env, d_.role_node(kManagerRole, region), std::move(e));
  }
}

void Coordinator::set_phase(Coord& c, Phase to) {
  transition(c.txn_id, c.phase, to, {{Phase::Preparing, Phase::Decided}});
}

double Coordinator::anticipate_us(const Coord& c, uint32_t region) const {
  // The decision reaches region `region` about one slowest prepare round trip
  // plus one one-way hop after the source timestamp was taken.
  double slowest = 0;
  for (uint32_t r : c.shape.regions) slowest = std::max(slowest, rtt_[r].value());
  // A negative margin may take it below zero: anticipate nothing then (the
  // replicas counter-propose), rather than send what the manager rejects.
  return std::max(0.0, slowest + rtt_[region].value() / 2 + opts_.anticipation_margin_ms * 1000);
}

void Coordinator::on_store_irt_ack(Env& env, NodeId from, const ::dast::StoreIRTAck& m) {
  if (m.has_clock()) site_.observe(env, from, from_proto(m.clock()));
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;  // already answered
  if (m.replica() >= d_.replicas ||
      !std::binary_search(it->second.shape.shards.begin(), it->second.shape.shards.end(), m.shard()))
    throw BadMessage("StoreIRTAck for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " replica " +
                     str(m.replica()) + ", which it does not touch");
  it->second.acks[m.shard()] |= 1u << m.replica();
  maybe_reply(env, m.txn_id());
}

void Coordinator::on_remote_prepared(Env& env, const ::dast::RemotePrepared& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;        // a late proposal: decided and answered without it
  Coord& c = it->second;
  if (c.phase == Phase::Decided) return;  // a late proposal
  if (c.phase != Phase::Preparing) throw BadMessage("RemotePrepared for txn " + str(m.txn_id()) + ", an IRT");
  uint32_t region = d_.region_of_shard(m.shard());
  if (auto sent = c.prepare_sent.find(region); sent != c.prepare_sent.end()) {
    rtt_[region].add(static_cast<double>(env.mono_us() - sent->second), sent->second, env.mono_us());  // first only
    c.prepare_sent.erase(sent);
  }
  c.proposals[m.shard()][m.replica()] = from_proto(m.proposal());
  // Each touched shard's leader (replica 0) has the CRT queued at its proposal, and a majority of the shard's
  // replicas stored it: decide D = max. The leader's proposal is the shard's: only the leader orders, the followers
  // execute in its order (Site), so a follower's clock binds nothing and a follower left out costs nothing.
  const size_t majority = d_.replicas / 2 + 1;
  for (uint32_t s : c.shape.shards) {
    const auto& got = c.proposals[s];
    if (got.size() < majority || (!got.count(0) && !mutant::kDecideWithoutLeader)) return;
  }
  Ts decision{};
  for (auto& [s, reps] : c.proposals)
    for (auto& [r, p] : reps) decision = std::max(decision, p);
  set_phase(c, Phase::Decided);
  c.decision = decision;
  // The decision goes to each touched region's manager, which hands it to every
  // site of its region at once (DistExe to the touched replicas, NotiCommit to
  // the others). Sent straight to each replica, it would arrive at the sites of a
  // region at independently jittered times, and a site that had it could order
  // new IRTs after the CRT while the CRT still waited for a site that had not.
  for (uint32_t region2 : c.shape.regions) {
    Envelope e;
    auto* nw = e.mutable_dast()->mutable_noti_wait();
    nw->set_txn_id(m.txn_id());
    *nw->mutable_decision() = to_proto(decision);
    nw->set_need_input_wait(c.shape.wait_regions.count(region2) != 0);
    post(env, d_.role_node(kManagerRole, region2), std::move(e));
  }
}

void Coordinator::on_piece_result(Env& env, NodeId from, const ::dast::PieceResult& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;
  Coord& c = it->second;
  c.results.insert(m.shard());
  for (const auto& [k, v] : m.vars()) c.outputs[k] = v;
  maybe_reply(env, m.txn_id());
}

void Coordinator::maybe_reply(Env& env, uint64_t txn_id) {
  auto it = coords_.find(txn_id);
  if (it == coords_.end()) return;
  Coord& c = it->second;
  const uint32_t majority = mutant::kOneAck ? 1 : d_.replicas / 2 + 1;
  for (uint32_t s : c.shape.shards) {
    if (!c.results.count(s) && !(mutant::kReplyOnHomeResult && s != c.home_shard)) return;
    if (c.phase == Phase::Irt && static_cast<uint32_t>(__builtin_popcount(c.acks[s])) < majority) return;
  }
  if (c.phase == Phase::Preparing) return;
  Envelope e;
  auto* r = e.mutable_reply();
  r->set_txn_id(txn_id);
  r->set_committed(true);
  *r->mutable_outputs() = c.outputs;
  // What the commit rests on (the durability check's): an IRT's stored copies, a CRT's proposals (each stored it)
  for (uint32_t s : c.shape.shards)
    add_stored(*r, s, c.phase == Phase::Irt ? c.acks[s] : replica_mask(c.proposals[s]));
  NodeId client = c.client;
  coords_.erase(it);
  env.send(client, std::move(e));
}

// ---- replica: storing and ordering -------------------------------------------

void Site::on_store_irt(Env& env, NodeId from, ::dast::StoreIRT& m) {
  Ts ts = from_proto(m.ts());
  if (d_.node(from).region != me_.region || d_.node(from).replica != 0)
    throw BadMessage("StoreIRT from " + d_.node(from).name + ", not a handler of this region");
  observe(env, from, ts);
  if (m.has_clock()) observe(env, from, from_proto(m.clock()));
  // The handler asked the other handlers to send us their clocks for ts (a leader's: followers ask for none, and
  // their record would only grow).
  if (leader())
    for (NodeId h : region_handlers_)
      if (h != from) asked_[h].insert(ts);
  const uint64_t id = m.txn().txn_id();
  TxnShape shape = analyze(d_, opts_, m.txn(), &w_);
  if (!(mutant::kFollowerSkipsUnstored && skipped_.erase(id)))
    add_entry(std::move(*m.mutable_txn()), std::move(shape), ts, Phase::Queued, m.handler(), m.output_replica());
  Envelope e;
  auto* a = e.mutable_dast()->mutable_store_irt_ack();
  a->set_txn_id(id);
  a->set_shard(me_.shard);
  a->set_replica(me_.replica);
  // A leader's clock tells the handler where this region's order stands; a follower's orders nothing (it does not
  // stretch below pending CRTs either: taken in, it would move the handler's clock past them).
  if (leader()) *a->mutable_clock() = to_proto(clock_.fresh(env.now_us()));
  post(env, m.handler(), std::move(e));
  try_execute(env);
}

void Site::on_store_crt(Env& env, NodeId from, ::dast::StoreCRT& m) {
  Ts p = from_proto(m.tr());
  // The leader never accepts a slot at or below what it may already have ordered:
  // it counter-proposes just above the clock, with room below it for the IRT
  // timestamps it keeps issuing while the proposal is pending (they order
  // before the CRT). Not (last.t + 1, 0): under a stretch that lands on the
  // pending timestamp's own microsecond, which frozen clocks (t - 1, c) never pass.
  // A follower stores it and says so: where it goes in the order is the leader's to say (follow()).
  if (leader() && (p <= clock_.last() || p <= last_proposal_) && !mutant::kNoCounterProposal) {
    const Ts& base = std::max(clock_.last(), last_proposal_);
    p = Ts{base.t, base.c + kProposalGap, self_};
    last_proposal_ = p;
    ++n_counter_proposals_;
  }
  const uint64_t id = m.txn().txn_id();
  TxnShape shape = analyze(d_, opts_, m.txn(), &w_);
  if (!(mutant::kFollowerSkipsUnstored && skipped_.erase(id)))
    add_entry(std::move(*m.mutable_txn()), std::move(shape), p, Phase::Undecided, m.coordinator(), m.output_replica());
  if (leader()) clock_.add_pending(id, p);
  Envelope e;
  auto* rp = e.mutable_dast()->mutable_remote_prepared();
  rp->set_txn_id(id);
  rp->set_shard(me_.shard);
  rp->set_replica(me_.replica);
  *rp->mutable_proposal() = to_proto(p);
  post(env, m.coordinator(), std::move(e));
  if (!leader()) try_execute(env);   // the leader's order may already name it
}

void Site::on_noti_crt(Env& env, const ::dast::NotiCRT& m) {
  if (!leader()) return;   // only leaders' clocks order anything
  if (!released_.count(m.txn_id())) clock_.add_pending(m.txn_id(), from_proto(m.tr()));
}

// An input that a piece of my shard cannot run without, that no piece on my
// shard produces, is not known yet (deferrable pieces may wait for theirs).
bool Site::holding_input_missing(const Entry& e) const {
  std::set<std::string> local_out;
  for (const auto& p : e.txn.pieces())
    if (p.shard() == me_.shard)
      for (const auto& v : p.outputs()) local_out.insert(v);
  for (const auto& p : e.txn.pieces())
    if (p.shard() == me_.shard && !deferrable(opts_, w_, p))
      for (const auto& v : p.inputs())
        if (!local_out.count(v) && !e.vars.count(v)) return true;
  return false;
}

void Site::on_dist_exe(Env& env, const ::dast::DistExe& m) {
  if (!leader()) throw BadMessage("DistExe for txn " + str(m.txn_id()) + " sent to a follower");
  auto it = entries_.find(m.txn_id());
  if (it == entries_.end()) throw BadMessage("DistExe for unknown txn " + str(m.txn_id()));
  Entry& e = it->second;
  Ts decision = from_proto(m.decision());
  if (e.phase != Phase::Undecided) throw BadMessage("second DistExe for txn " + str(m.txn_id()));
  if (decision < e.ts) throw BadMessage("DistExe decision below this replica's proposal");
  clock_.remove_pending(m.txn_id());
  undecided_.erase({e.ts, m.txn_id()});
  if (!mutant::kCrtAtProposal) rekey(e, decision);
  set_phase(e, Phase::Queued);
  for (NodeId h : region_handlers_) asked_[h].insert(decision);  // the manager asked them
  if (e.shape.wait_regions.count(me_.region)) {
    // Keep the region's clocks below D until the cross-region inputs are here,
    // so IRTs keep ordering (and executing) before this CRT. Every site drops D
    // at the manager's release (all at once); a replica still missing an input
    // keeps it until the input is here.
    const bool missing = e.shape.input_shards.count(me_.shard) && holding_input_missing(e);
    e.holds_input_wait = missing;
    if (missing || !released_.count(m.txn_id())) clock_.add_pending(m.txn_id(), decision);
    if (e.shape.input_shards.count(me_.shard) && !missing) inputs_arrived(env, e);
  }
  try_execute(env);
}

void Site::inputs_arrived(Env& env, Entry& e) {
  e.holds_input_wait = false;
  if (released_.count(e.txn.txn_id())) clock_.remove_pending(e.txn.txn_id());
  if (me_.replica == e.output_replica) {
    Envelope n;
    auto* nw = n.mutable_dast()->mutable_noti_wait();
    nw->set_txn_id(e.txn.txn_id());
    *nw->mutable_decision() = to_proto(e.ts);
    nw->set_release(true);
    post(env, d_.role_node(kManagerRole, me_.region), std::move(n));
  }
}

void Site::on_noti_commit(Env& env, const ::dast::NotiCommit& m) {
  if (!leader()) return;   // only leaders' clocks order anything
  auto it = entries_.find(m.txn_id());
  bool own_wait = it != entries_.end() && it->second.holds_input_wait;
  if (m.release()) {
    released_[m.txn_id()] = env.mono_us();
    if (!own_wait) clock_.remove_pending(m.txn_id());
  } else if (!own_wait) {
    clock_.remove_pending(m.txn_id());
    if (m.need_input_wait() && !released_.count(m.txn_id()))
      clock_.add_pending(m.txn_id(), from_proto(m.decision()));
  }
  try_execute(env);
}

void Site::on_send_output(Env& env, const ::dast::SendOutput& m) {
  auto it = entries_.find(m.txn_id());
  if (it == entries_.end()) {
    auto& early = early_vars_[m.txn_id()];
    for (const auto& [k, v] : m.vars()) early[k] = v;
    return;
  }
  Entry& e = it->second;
  for (const auto& [k, v] : m.vars()) e.vars[k] = v;
  if (e.phase == Phase::Deferred) {
    // Out of the queue already: only deferrable pieces were waiting.
    run_pieces(env, e);
    if (local_pieces_done(e)) complete(env, e);
    return;
  }
  if (e.holds_input_wait && !holding_input_missing(e)) inputs_arrived(env, e);
  try_execute(env);
}

void Site::on_sync(Env& env, NodeId from, const ::dast::IRSync& m) {
  if (d_.node(from).region != me_.region) throw BadMessage("IRSync from another region");
  observe(env, from, from_proto(m.clock()));
  try_execute(env);
}

// ---- execution ------------------------------------------------------------------

bool Site::known_past(NodeId handler, const Ts& t) const {
  auto it = known_clock_.find(handler);
  return it != known_clock_.end() && t < it->second;
}

bool Site::handlers_past(const Ts& t) const {
  if (mutant::kWatermarkLocal) return true;
  for (NodeId s : region_handlers_)
    if (!known_past(s, t)) return false;
  return true;
}

void Site::ask_clocks(Env& env, const Ts& t) {
  Ts mine{};
  for (NodeId s : region_handlers_) {
    if (known_past(s, t)) continue;
    auto& asked = asked_[s];
    if (auto it = known_clock_.find(s); it != known_clock_.end())
      asked.erase(asked.begin(), asked.lower_bound(it->second));  // answered already
    if (!asked.empty() && *asked.begin() <= t) continue;
    if (mine.t == 0) mine = clock_.fresh(env.now_us());
    Envelope e;
    auto* w = e.mutable_dast()->mutable_clock_want();
    *w->mutable_t() = to_proto(t);
    *w->mutable_clock() = to_proto(mine);
    asked.insert(t);
    env.send(s, std::move(e));
  }
}

// The safety rule (docs/protocols/dast.md): the queue's first entry executes once it is decided and no timestamp
// at or below its own can still be issued in this region: every other handler's clock is known to be past it
// (handlers_past) and this site's clock is moved past it (fresh() issues a timestamp above it, so none at or
// below it is issued here afterwards, whatever CRT is pending later).
void Site::try_execute(Env& env) {
  if (!leader()) return follow(env);
  run_queue(env);
  send_order(env);
}

void Site::run_queue(Env& env) {
  serve_wants(env);  // a released pending timestamp may let our clock pass what peers wait for
  while (!queue_.empty()) {
    auto head = queue_.begin();
    if (mutant::kPassUndecided) while (head != queue_.end() && entries_.at(head->second).phase == Phase::Undecided) ++head;
    if (head == queue_.end()) return;
    Entry& e = entries_.at(head->second);
    if (e.phase == Phase::Undecided) {
      wake_when_past(env, e.ts);
      return;
    }
    TXN_CHECK(e.phase == Phase::Queued, "txn " + str(e.txn.txn_id()) + " in the queue after its slot");
    if (!handlers_past(e.ts)) {
      ask_clocks(env, e.ts);
      wake_when_past(env, e.ts);
      return;
    }
    if (!(e.ts < clock_.fresh(env.now_us()))) {
      wake_when_past(env, e.ts);  // our own clock is what it waits for
      return;
    }
    if (!run_pieces(env, e)) return;
    leave_slot(env, e);
    if (local_pieces_done(e)) complete(env, e);
    else set_phase(e, Phase::Deferred);  // its deferrable pieces run when their inputs arrive
  }
}

void Site::send_order(Env& env) {
  if (order_out_.empty()) return;
  Envelope e;
  auto* ex = e.mutable_dast()->mutable_executed();
  for (const auto& [id, ts] : order_out_) {
    auto* q = ex->add_order();
    q->set_txn_id(id);
    *q->mutable_ts() = to_proto(ts);
  }
  order_out_.clear();
  for (size_t i = 0; i < followers_.size(); ++i) post(env, followers_[i], i + 1 < followers_.size() ? e : std::move(e));
}

void Site::on_executed(Env& env, NodeId from, const ::dast::Executed& m) {
  if (leader() || from != handler_of(d_, me_.shard))
    throw BadMessage("Executed from " + d_.node(from).name + ", not the leader of " + me_.name + "'s shard");
  for (const auto& q : m.order()) follow_.emplace_back(q.txn_id(), from_proto(q.ts()));
  follow(env);
}

// A follower executes the leader's order, each transaction once it is stored here (its StoreIRT or StoreCRT may come
// after the leader's word on another channel) and its pieces' inputs are here, at the leader's timestamp (a CRT's
// decision, whatever this replica proposed). Its state is then the leader's, one message later.
void Site::follow(Env& env) {
  while (!follow_.empty()) {
    const auto& [id, ts] = follow_.front();
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      if (!mutant::kFollowerSkipsUnstored) return;   // still on its way
      skipped_.insert(id);
      follow_.pop_front();
      continue;
    }
    Entry& e = it->second;
    if (e.phase == Phase::Undecided) {
      undecided_.erase({e.ts, id});
      rekey(e, ts);
      set_phase(e, Phase::Queued);
    } else if (e.phase != Phase::Queued || !(e.ts == ts)) {
      throw BadMessage("the leader ordered txn " + str(id) + " at " + str(ts.t) + "." + str(ts.c) + ", not where " +
                       me_.name + " holds it");
    }
    if (!run_pieces(env, e)) return;   // an input from another shard is still on its way
    leave_slot(env, e);
    follow_.pop_front();
    if (local_pieces_done(e)) complete(env, e);
    else set_phase(e, Phase::Deferred);
  }
}

// The order key DAST executes by (docs/protocols/dast.md): the transaction's timestamp at this replica, an IRT's
// as its handler issued it, a CRT's decision; one domain for all. (The queue breaks a tie in (t, c) by the issuing
// site and the txn id; the key leaves ties unordered.)
static OrderKey exec_key(const Ts& ts) {
  return order_key(0, static_cast<uint64_t>(ts.t), static_cast<uint64_t>(ts.c));
}

bool Site::run_pieces(Env& env, Entry& e) {
  for (const auto& p : e.txn.pieces()) {
    if (p.shard() != me_.shard || e.done.count(p.id())) continue;
    Vars scratch, out;
    const Vars* in = piece_vars(p, e.vars, &scratch);
    if (!in) {
      // Blocked on a value from another shard: the entry keeps its slot unless
      // the piece commutes with everything and may run later.
      if (!deferrable(opts_, w_, p)) return false;
      continue;
    }
    try {
      exec_.execute(e.txn.txn_id(), p, *in, &out, e.phase == Phase::Deferred, exec_key(e.ts));
    } catch (const BadMessage& err) {
      // Deterministic on every replica: the piece is skipped everywhere.
      env.log("txn " + str(e.txn.txn_id()) + " piece " + str(p.id()) + ": " + err.what());
    }
    for (const auto& [k, v] : out) e.vars[k] = v;
    e.done.insert(p.id());
  }
  return true;
}

bool Site::local_pieces_done(const Entry& e) const {
  size_t local = 0;
  for (const auto& p : e.txn.pieces()) local += p.shard() == me_.shard;
  return e.done.size() == local;
}

namespace {
// Variables the pieces of `shard` produced.
Vars produced_on(const TxnRequest& txn, uint32_t shard, const Vars& vars) {
  Vars produced;
  for (const auto& p : txn.pieces())
    if (p.shard() == shard)
      for (const auto& v : p.outputs())
        if (auto it = vars.find(v); it != vars.end()) produced[v] = it->second;
  return produced;
}
}  // namespace

// The entry's place in the order is done: forward the variables other shards
// need (deferrable pieces produce none, so they are all known) and free the slot.
void Site::leave_slot(Env& env, Entry& e) {
  const uint64_t id = e.txn.txn_id();
  const Vars produced = produced_on(e.txn, me_.shard, e.vars);
  std::map<uint32_t, Vars> needs;
  for (const auto& p : e.txn.pieces()) {
    if (p.shard() == me_.shard) continue;
    for (const auto& v : p.inputs())
      if (auto it = produced.find(v); it != produced.end()) needs[p.shard()][v] = it->second;
  }
  // The output replica sends them to every replica of the shards that need them (a follower's copy would wait
  // for that follower).
  if (me_.replica == e.output_replica)
    for (auto& [shard, vars] : needs)
      for (NodeId r : d_.replicas_of(shard)) {
        Envelope o;
        auto* so = o.mutable_dast()->mutable_send_output();
        so->set_txn_id(id);
        so->set_from_shard(me_.shard);
        *so->mutable_vars() = vars;
        post(env, r, std::move(o));
      }
  if (leader() && !followers_.empty()) order_out_.emplace_back(id, e.ts);
  if (keep_log_) exec_log_.push_back(ExecRecord{e.ts, e.txn});
  ++n_executed_;
  if (e.holds_input_wait) clock_.remove_pending(id);
  queue_.erase({e.ts, id});
}

// Every local piece has run: the output replica reports to the coordinator.
void Site::complete(Env& env, Entry& e) {
  const uint64_t id = e.txn.txn_id();
  if (me_.replica == e.output_replica) {
    Envelope r;
    auto* pr = r.mutable_dast()->mutable_piece_result();
    pr->set_txn_id(id);
    pr->set_shard(me_.shard);
    *pr->mutable_vars() = produced_on(e.txn, me_.shard, e.vars);
    post(env, e.coordinator, std::move(r));
  }
  entries_.erase(id);
}

}  // namespace txn::dast
