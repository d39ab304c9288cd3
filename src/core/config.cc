// Deployment file parsing and validation (docs/deploy-schema.md).
#include "config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "protocol.h"

namespace txn {
namespace {

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw ConfigError(key + ": " + what);
}

std::string show(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

template <class T>
T as(const YAML::Node& n, const std::string& key, const char* type) {
  if (!n.IsScalar()) fail(key, std::string("expected ") + type + ", got " + show(n));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(key, std::string("expected ") + type + ", got " + show(n));
  }
}

double num(const YAML::Node& n, const std::string& key) {
  double v = as<double>(n, key, "a number");
  if (!std::isfinite(v)) fail(key, "expected a finite number, got " + show(n));
  return v;
}
int64_t integer(const YAML::Node& n, const std::string& key) {
  return as<int64_t>(n, key, "an integer");
}
std::string str(const YAML::Node& n, const std::string& key) {
  return as<std::string>(n, key, "a string");
}
bool boolean(const YAML::Node& n, const std::string& key) {
  return as<bool>(n, key, "true or false");
}

// Rejects keys not in `allowed`.
void check_keys(const YAML::Node& m, const std::string& where,
                const std::set<std::string>& allowed) {
  if (!m.IsMap()) fail(where, "expected a mapping, got " + show(m));
  for (const auto& kv : m) {
    std::string k = kv.first.Scalar();
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(where.empty() ? k : where + "." + k, "unknown key (allowed: " + list + ")");
    }
  }
}

// Open loop's bounds: a million arrivals per second is far beyond what one client process can issue (the arrivals
// would queue and be shed, which is measured, not wrong); ten million outstanding bounds its memory.
constexpr double kMaxRateTps = 1e6;
constexpr int64_t kMaxOutstanding = 10000000;

void range(const std::string& key, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) {
    std::ostringstream o;
    o << v << " out of range [" << lo << ", " << hi << "]";
    fail(key, o.str());
  }
}

void int_range(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    fail(key, std::to_string(v) + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The `kind`s a node may have under `spec`, for error messages.
std::string kinds_of(const ProtocolSpec& spec) {
  std::string k = "replica|client";
  for (const auto& r : spec.roles) k += "|" + r.name;
  return k;
}

// protocols.<p>.<name>: the option's schema, or a ConfigError naming the key.
const OptionSpec& option_of(const ProtocolSpec& p, const std::string& name) {
  if (const OptionSpec* o = p.option(name)) return *o;
  std::string list;
  for (const auto& o : p.options) list += (list.empty() ? "" : ", ") + o.name;
  fail("protocols." + p.name + "." + name, "not an option of " + p.name + " (options: " + (list.empty() ? "none" : list) + ")");
}

// protocols.<name>: every option known to that protocol's schema and acceptable.
void check_protocol_options(const std::string& name, const OptionValues& values) {
  const ProtocolSpec& p = find_protocol(name, "protocols." + name);
  for (const auto& [k, v] : values) {
    std::string why = option_of(p, k).problem(v);
    if (!why.empty()) fail("protocols." + name + "." + k, why);
  }
}

// The roles of d.mode: one node per region, or a group of distinct regions.
void check_roles(const Deployment& d, const ProtocolSpec& spec) {
  for (const auto& role : spec.roles) {
    std::vector<int> in_region(d.regions, 0);
    uint32_t members = 0;
    for (const auto& n : d.nodes) {
      if (n.kind != NodeKind::Role || n.role != role.name) continue;
      ++members;
      if (++in_region[n.region] > 1)
        fail("nodes[" + std::to_string(n.id) + "]", "second " + role.name + " in region " + std::to_string(n.region) +
                                                        (role.placement == Placement::Group ? " (its group needs distinct regions)" : ""));
    }
    if (role.placement == Placement::PerRegion) {
      for (uint32_t r = 0; r < d.regions; ++r)
        if (!in_region[r])
          fail("nodes", "region " + std::to_string(r) + " has no " + role.name + " (mode " + d.mode + " needs one per region)");
    } else if (members != role.size) {
      fail("nodes", "mode " + d.mode + " needs " + std::to_string(role.size) + " " + role.name +
                        " nodes in distinct regions, found " + std::to_string(members));
    }
  }
}


// ---- faults (docs/nemesis.md)
std::string secs(TimeUs us) {
  std::ostringstream o;
  o << static_cast<double>(us) / 1e6 << " s";
  return o.str();
}

// A window: start >= 0, end after it and no later than the clients' load ends (what is held is then released
// before the clients stop; a fault past the end would not be seen).
void check_window(const std::string& key, const FaultWindow& w, const Deployment& d, bool needs_end) {
  const TimeUs run_end = static_cast<TimeUs>(std::llround(d.client.duration_s * 1e6));
  if (w.start_us < 0) fail(key + ".start_s", "must be >= 0 (times count from the start of the clients' load)");
  if (w.start_us >= run_end)
    fail(key + ".start_s", secs(w.start_us) + " is not before the run's end (client.duration_s = " + secs(run_end) + ")");
  if (!needs_end) return;
  if (w.end_us == kNoTime) fail(key + ".end_s", "missing");
  if (w.end_us <= w.start_us) fail(key + ".end_s", "must be after start_s");
  if (w.end_us > run_end)
    fail(key + ".end_s", secs(w.end_us) + " is past the run's end (client.duration_s = " + secs(run_end) + ")");
}

void check_faults(const Deployment& d) {
  const FaultPlan& f = d.faults;
  auto region_ok = [&](const std::string& key, uint32_t r) {
    if (r >= d.regions)
      fail(key, "region " + std::to_string(r) + " not in the deployment (regions 0.." + std::to_string(d.regions - 1) + ")");
  };
  for (size_t i = 0; i < f.partitions.size(); ++i) {
    const auto& p = f.partitions[i];
    const std::string key = "faults[partition " + std::to_string(i) + (p.id.empty() ? "" : " " + p.id) + "]";
    check_window(key, p.w, d, true);
    if (p.regions.empty()) fail(key + ".regions", "must name at least one region");
    std::set<uint32_t> seen;
    for (uint32_t r : p.regions) {
      region_ok(key + ".regions", r);
      if (!seen.insert(r).second) fail(key + ".regions", "region " + std::to_string(r) + " listed twice");
    }
    if (seen.size() >= d.regions) fail(key + ".regions", "a cut needs regions on both sides, these are all of them");
    for (size_t j = 0; j < i; ++j)
      if (f.partitions[j].w.overlaps(p.w))
        fail(key, "overlaps partition " + std::to_string(j) + " in time (one cut at a time)");
  }
  for (size_t i = 0; i < f.links.size(); ++i) {
    const auto& l = f.links[i];
    const bool spike = l.kind == LinkFault::Kind::Spike;
    const std::string key = std::string("faults[") + (spike ? "spike " : "jitter ") + std::to_string(i) +
                            (l.id.empty() ? "" : " " + l.id) + "]";
    check_window(key, l.w, d, true);
    if (l.links.empty()) fail(key + ".links", "must name at least one link");
    for (const auto& [a, b] : l.links) {
      region_ok(key + ".links", a);
      region_ok(key + ".links", b);
    }
    if (l.amount_us <= 0 || l.amount_us > 60'000'000)
      fail(key + (spike ? ".extra_ms" : ".jitter_ms"), "must be in (0, 60000]");
    for (size_t k = 0; k < l.to_ids.size(); ++k) {   // a node the links never reach would never be delayed
      const uint32_t r = d.node(l.to_ids[k]).region;
      for (const auto& [a, b] : l.links)
        if (b != r)
          fail(key + ".to_nodes", "'" + l.to_nodes[k] + "' is in region " + std::to_string(r) +
                                      ", not the destination of link " + std::to_string(a) + "->" + std::to_string(b));
    }
    for (size_t j = 0; j < i; ++j) {
      const auto& o = f.links[j];
      if (o.kind != l.kind || !o.w.overlaps(l.w) || !l.shares_link_with(o)) continue;
      for (const auto& [a, b] : l.links)
        if (o.covers(a, b))
          fail(key, std::string("overlaps ") + (spike ? "spike" : "jitter") + " " + std::to_string(j) + " on link " +
                        std::to_string(a) + "->" + std::to_string(b) + " in time");
    }
  }
  for (size_t i = 0; i < f.clocks.size(); ++i) {
    const auto& c = f.clocks[i];
    const std::string key = "faults[clock " + std::to_string(i) + (c.id.empty() ? "" : " " + c.id) + "]";
    check_window(key, FaultWindow{c.start_us, c.end_us}, d, c.end_us != kNoTime);
    if (c.end_us != kNoTime) check_window(key, FaultWindow{c.start_us, c.end_us}, d, true);
    if (c.ids.empty()) fail(key + ".nodes", "must name at least one node");
    for (NodeId id : c.ids)
      if (id >= d.nodes.size()) fail(key + ".nodes", "node id " + std::to_string(id) + " not in the deployment");
    for (size_t j = 0; j < i; ++j) {
      const auto& o = f.clocks[j];
      if (!FaultWindow{o.start_us, o.end_us}.overlaps(FaultWindow{c.start_us, c.end_us})) continue;
      for (NodeId id : c.ids)
        if (std::find(o.ids.begin(), o.ids.end(), id) != o.ids.end())
          fail(key + ".nodes", "a second clock fault on " + d.nodes[id].name + " at the same time (clock " +
                                   std::to_string(j) + ")");
    }
    if (std::llabs(c.offset_us) > 3'600'000'000LL) fail(key + ".offset_ms", "must be in [-3600000, 3600000]");
    if (!(std::fabs(c.drift_ppm) <= 100000)) fail(key + ".drift_ppm", "must be in [-100000, 100000]");
    if (c.offset_us == 0 && c.drift_ppm == 0) fail(key, "neither offset_ms nor drift_ppm set: no fault");
  }
}

TimeUs seconds_us(const YAML::Node& n, const std::string& key) {
  const double v = num(n, key);
  if (std::fabs(v) > 1e6) fail(key, "out of range [-1000000, 1000000]");
  return static_cast<TimeUs>(std::llround(v * 1e6));
}
TimeUs ms_us(const YAML::Node& n, const std::string& key) {
  const double v = num(n, key);
  if (std::fabs(v) > 1e9) fail(key, "out of range");
  return static_cast<TimeUs>(std::llround(v * 1e3));
}

// faults: a list of {kind, ...} (docs/deploy-schema.md); validate() checks the values against the deployment.
void parse_faults(const YAML::Node& list, Deployment& d) {
  if (!list.IsSequence()) fail("faults", "expected a list, got " + show(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node& y = list[i];
    const std::string key = "faults[" + std::to_string(i) + "]";
    if (!y.IsMap()) fail(key, "expected a mapping, got " + show(y));
    if (!y["kind"]) fail(key + ".kind", "missing (expected partition|spike|jitter|clock|pause|crash)");
    const std::string kind = str(y["kind"], key + ".kind");
    std::string id;
    if (y["id"]) id = str(y["id"], key + ".id");
    if (y["spec"]) str(y["spec"], key + ".spec");   // free text: the schedule item it came from (docs/nemesis.md)
    auto window = [&](bool needs_end) {
      FaultWindow w;
      if (y["start_s"]) w.start_us = seconds_us(y["start_s"], key + ".start_s");
      if (y["end_s"]) w.end_us = seconds_us(y["end_s"], key + ".end_s");
      else if (needs_end) fail(key + ".end_s", "missing");
      return w;
    };
    auto regions = [&](const YAML::Node& n, const std::string& k) {
      std::vector<uint32_t> out;
      if (!n || !n.IsSequence()) fail(k, "expected a list of regions (0-based), got " + (n ? show(n) : "nothing"));
      for (size_t j = 0; j < n.size(); ++j) {
        const int64_t r = integer(n[j], k);
        if (r < 0 || r > 1000000) fail(k, std::to_string(r) + " is not a region");
        out.push_back(static_cast<uint32_t>(r));
      }
      return out;
    };
    // A list of node names (a sequence, checked by the caller), each resolved to its id.
    auto node_names = [&](const YAML::Node& n, const std::string& k, std::vector<std::string>& names,
                          std::vector<NodeId>& ids) {
      for (size_t j = 0; j < n.size(); ++j) {
        const std::string name = str(n[j], k);
        const NodeInfo* node = d.find(name);
        if (!node) fail(k, "'" + name + "' is not a node of the deployment");
        names.push_back(name);
        ids.push_back(node->id);
      }
    };
    if (kind == "partition") {
      check_keys(y, key, {"id", "spec", "kind", "regions", "start_s", "end_s"});
      PartitionFault p;
      p.id = id;
      p.regions = regions(y["regions"], key + ".regions");
      p.w = window(true);
      d.faults.partitions.push_back(std::move(p));
    } else if (kind == "spike" || kind == "jitter") {
      const bool spike = kind == "spike";
      const char* amount = spike ? "extra_ms" : "jitter_ms";
      check_keys(y, key, {"id", "spec", "kind", "links", "to_nodes", amount, "start_s", "end_s"});
      LinkFault l;
      l.id = id;
      l.kind = spike ? LinkFault::Kind::Spike : LinkFault::Kind::Jitter;
      const YAML::Node links = y["links"];
      if (!links || !links.IsSequence())
        fail(key + ".links", "expected a list of [source region, destination region] pairs");
      for (size_t j = 0; j < links.size(); ++j) {
        const auto pair = regions(links[j], key + ".links[" + std::to_string(j) + "]");
        if (pair.size() != 2) fail(key + ".links[" + std::to_string(j) + "]", "expected [source region, destination region]");
        l.links.emplace_back(pair[0], pair[1]);
      }
      if (const YAML::Node to = y["to_nodes"]) {
        if (!to.IsSequence() || to.size() == 0) fail(key + ".to_nodes", "expected a non-empty list of node names");
        node_names(to, key + ".to_nodes", l.to_nodes, l.to_ids);
      }
      if (!y[amount]) fail(key + "." + amount, "missing");
      l.amount_us = ms_us(y[amount], key + "." + amount);
      l.w = window(true);
      d.faults.links.push_back(std::move(l));
    } else if (kind == "clock") {
      check_keys(y, key, {"id", "spec", "kind", "nodes", "offset_ms", "drift_ppm", "start_s", "end_s"});
      ClockFault c;
      c.id = id;
      const YAML::Node nodes = y["nodes"];
      if (!nodes || !nodes.IsSequence()) fail(key + ".nodes", "expected a list of node names");
      node_names(nodes, key + ".nodes", c.nodes, c.ids);
      if (y["offset_ms"]) c.offset_us = ms_us(y["offset_ms"], key + ".offset_ms");
      if (y["drift_ppm"]) c.drift_ppm = num(y["drift_ppm"], key + ".drift_ppm");
      const FaultWindow w = window(false);
      c.start_us = w.start_us;
      c.end_us = w.end_us;
      d.faults.clocks.push_back(std::move(c));
    } else if (kind == "pause" || kind == "crash") {
      // The runner's (a signal to a process, a new process): the engine never reads them (core/faults.h)
    } else {
      fail(key + ".kind", "'" + kind + "' unknown (expected partition|spike|jitter|clock|pause|crash)");
    }
  }
}

}  // namespace

TimeUs LinkModel::one_way_us(uint32_t a, uint32_t b) const {
  if (a >= rtt_ms.size() || b >= rtt_ms[a].size()) return 0;
  return static_cast<TimeUs>(std::llround(rtt_ms[a][b] * 1000.0 / 2.0));
}

const NodeInfo& Deployment::node(NodeId id) const {
  if (id >= nodes.size()) throw ConfigError("node id " + std::to_string(id) + " out of range");
  return nodes[id];
}

const NodeInfo* Deployment::find(const std::string& n) const {
  for (const auto& x : nodes)
    if (x.name == n) return &x;
  return nullptr;
}

NodeId Deployment::replica_id(uint32_t shard, uint32_t replica) const {
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Replica && x.shard == shard && x.replica == replica) return x.id;
  throw ConfigError("no replica " + std::to_string(replica) + " of shard " +
                    std::to_string(shard));
}

NodeId Deployment::role_node(const std::string& role, uint32_t region) const {
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Role && x.role == role && x.region == region) return x.id;
  throw ConfigError("no " + role + " in region " + std::to_string(region));
}

std::vector<NodeId> Deployment::role_nodes(const std::string& role) const {
  std::vector<NodeId> r;
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Role && x.role == role) r.push_back(x.id);
  return r;
}

std::vector<NodeId> Deployment::replicas_of(uint32_t shard) const {
  std::vector<NodeId> out(replicas, UINT32_MAX);
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Replica && x.shard == shard && x.replica < replicas)
      out[x.replica] = x.id;
  std::vector<NodeId> r;
  for (NodeId id : out)
    if (id != UINT32_MAX) r.push_back(id);
  return r;
}

std::vector<NodeId> Deployment::sites_of_region(uint32_t region) const {
  std::vector<NodeId> r;
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Replica && x.region == region) r.push_back(x.id);
  return r;
}

std::vector<NodeId> Deployment::clients() const {
  std::vector<NodeId> r;
  for (const auto& x : nodes)
    if (x.kind == NodeKind::Client) r.push_back(x.id);
  return r;
}

const std::string& Deployment::process_of(NodeId id) const {
  const NodeInfo& n = node(id);
  return n.process.empty() ? n.name : n.process;
}

std::vector<NodeId> Deployment::process_nodes(const std::string& p) const {
  std::vector<NodeId> r;
  for (const auto& x : nodes)
    if ((x.process.empty() ? x.name : x.process) == p) r.push_back(x.id);
  return r;
}

NodeId Deployment::endpoint(NodeId id) const {
  if (node(id).process.empty()) return id;
  for (const auto& x : nodes)
    if (x.process == nodes[id].process) return x.id;
  return id;
}

void validate(const Deployment& d) {
  const ProtocolSpec& spec = find_protocol(d.mode);
  range("regions", d.regions, 1, 64);
  if (d.regions < spec.min_regions)
    fail("regions", d.mode + " needs regions >= " + std::to_string(spec.min_regions));
  range("shards_per_region", d.shards_per_region, 1, 1024);
  if (d.replicas != 3) fail("replicas", std::to_string(d.replicas) + " unsupported (expected 3)");

  const auto& l = d.link;
  if (l.mechanism != "app" && l.mechanism != "netem" && l.mechanism != "none")
    fail("link.mechanism", "'" + l.mechanism + "' unknown (expected app|netem|none)");
  std::string dim = std::to_string(d.regions) + "x" + std::to_string(d.regions);
  if (l.rtt_ms.size() != d.regions)
    fail("link.rtt_ms", "expected " + dim + " matrix, got " + std::to_string(l.rtt_ms.size()) + " rows");
  for (size_t i = 0; i < l.rtt_ms.size(); ++i) {
    if (l.rtt_ms[i].size() != d.regions)
      fail("link.rtt_ms", "expected " + dim + " matrix, row " + std::to_string(i) + " has " +
                              std::to_string(l.rtt_ms[i].size()) + " entries");
    for (size_t j = 0; j < l.rtt_ms[i].size(); ++j)
      if (!(l.rtt_ms[i][j] >= 0))
        fail("link.rtt_ms", "entry [" + std::to_string(i) + "][" + std::to_string(j) +
                                "] must be >= 0");
  }
  if (!(l.jitter_ms >= 0)) fail("link.jitter_ms", "must be >= 0");

  const auto& w = d.workload;
  if (!(w.scale > 0)) fail("workload.scale", "must be > 0");
  if (w.mix.size() != 5) fail("workload.mix", "expected 5 weights, got " + std::to_string(w.mix.size()));
  double sum = 0;
  for (double m : w.mix) {
    if (!(m >= 0)) fail("workload.mix", "weights must be >= 0");
    sum += m;
  }
  if (!(sum > 0)) fail("workload.mix", "weights must have a positive sum");
  if (w.payment_crt_rate != -1 && (w.payment_crt_rate < 0 || w.payment_crt_rate > 100))
    fail("workload.payment_crt_rate", std::to_string(w.payment_crt_rate) + " out of range (expected -1 or 0..100)");
  range("workload.remote_item_prob", w.remote_item_prob, 0, 1);
  range("workload.remote_customer_prob", w.remote_customer_prob, 0, 1);
  range("workload.by_name_prob", w.by_name_prob, 0, 1);
  range("workload.zipf", w.zipf, 0, 1);
  if (w.tpca_rows < 1) fail("workload.tpca_rows", "must be >= 1");
  range("workload.tpca_crt_ratio", w.tpca_crt_ratio, 0, 1);
  int_range("workload.append_keys", w.append_keys, 1, 100000);
  range("workload.append_crt_ratio", w.append_crt_ratio, 0, 1);
  int_range("workload.append_read_tail", w.append_read_tail, 0, 64);
  if (w.district != "fixed" && w.district != "uniform")
    fail("workload.district", "'" + w.district + "' (expected fixed or uniform)");

  const auto& c = d.client;
  if (c.n_concurrent < 1) fail("client.n_concurrent", "must be >= 1");
  if (!(c.duration_s > 0)) fail("client.duration_s", "must be > 0");
  if (!(c.warmup_s >= 0)) fail("client.warmup_s", "must be >= 0");
  if (!(c.cooldown_s >= 0)) fail("client.cooldown_s", "must be >= 0");
  if (!(c.drain_timeout_s > 0)) fail("client.drain_timeout_s", "must be > 0");
  if (!(c.warmup_s + c.cooldown_s < c.duration_s))
    fail("client.warmup_s", "warmup_s + cooldown_s must be < duration_s");
  if (c.retry_limit < 1) fail("client.retry_limit", "must be >= 1");
  if (!(c.retry_backoff_ms >= 0 && c.retry_backoff_ms <= 60000)) {
    std::ostringstream o;
    o << c.retry_backoff_ms << " out of range [0, 60000] (ms; 0: retry at once)";
    fail("client.retry_backoff_ms", o.str());
  }
  if (!(c.retry_backoff_max_ms >= c.retry_backoff_ms && c.retry_backoff_max_ms <= 600000)) {
    std::ostringstream o;
    o << c.retry_backoff_max_ms << " out of range [client.retry_backoff_ms, 600000] (ms)";
    fail("client.retry_backoff_max_ms", o.str());
  }
  if (!(c.rate_tps >= 0 && c.rate_tps <= kMaxRateTps)) {
    std::ostringstream o;
    o << c.rate_tps << " out of range [0, " << static_cast<int64_t>(kMaxRateTps) << "] (txn/s; 0: closed loop)";
    fail("client.rate_tps", o.str());
  }
  int_range("client.max_outstanding", c.max_outstanding, 1, kMaxOutstanding);

  for (const auto& [name, values] : d.protocols) check_protocol_options(name, values);

  // Nodes.
  if (d.nodes.empty()) fail("nodes", "no nodes listed");
  std::set<std::string> names, addrs;
  std::set<std::pair<uint32_t, uint32_t>> reps;  // (shard, replica)
  for (size_t i = 0; i < d.nodes.size(); ++i) {
    const auto& n = d.nodes[i];
    std::string key = "nodes[" + std::to_string(i) + "]";
    if (n.id != i) fail(key, "id " + std::to_string(n.id) + " does not match position");
    if (n.name.empty()) fail(key + ".name", "must not be empty");
    if (!names.insert(n.name).second) fail(key + ".name", "duplicate name '" + n.name + "'");
    if (n.host.empty()) fail(key + ".host", "must not be empty");
    if (n.port == 0) fail(key + ".port", "0 out of range [1, 65535]");
    std::string a = n.host + ":" + std::to_string(n.port);
    if (!addrs.insert(a).second) fail(key + ".port", "duplicate host:port " + a + " (node " + n.name + ")");
    if (n.region >= d.regions)
      fail(key + ".region", std::to_string(n.region) + " out of range [0, " + std::to_string(d.regions - 1) + "]");
    if (n.kind == NodeKind::Role && !spec.role(n.role))
      fail(key + ".kind", "'" + n.role + "' unknown (expected " + kinds_of(spec) + ")");
    if (n.kind != NodeKind::Role) {
      uint32_t lo = n.region * d.shards_per_region, hi = lo + d.shards_per_region;
      if (n.shard < lo || n.shard >= hi)
        fail(key + ".shard", "shard of " + n.name + " not in region " + std::to_string(n.region) +
                                 " (expected 0.." + std::to_string(d.shards_per_region - 1) + ")");
    }
    if (n.kind == NodeKind::Replica) {
      if (n.replica >= d.replicas)
        fail(key + ".replica", std::to_string(n.replica) + " out of range [0, " + std::to_string(d.replicas - 1) + "]");
      if (!reps.insert({n.shard, n.replica}).second)
        fail(key + ".replica", "duplicate replica " + std::to_string(n.replica) + " of shard " +
                                   std::to_string(n.shard));
    }
  }
  // Processes: one host, one region, clients or servers (they have different lives: clients end with the run).
  std::map<std::string, const NodeInfo*> first_of;
  for (const auto& n : d.nodes) {
    if (n.process.empty()) continue;
    const std::string key = "nodes[" + std::to_string(n.id) + "].process";
    if (d.find(n.process) && d.find(n.process)->name != n.name)
      fail(key, "'" + n.process + "' is the name of another node");
    auto [it, fresh] = first_of.emplace(n.process, &n);
    const NodeInfo& f = *it->second;
    if (fresh) continue;
    if (f.host != n.host)
      fail(key, "process '" + n.process + "' on two hosts (" + f.name + " on " + f.host + ", " + n.name + " on " +
                    n.host + ")");
    if (f.region != n.region)
      fail(key, "process '" + n.process + "' in two regions (" + f.name + ", " + n.name + ")");
  }
  for (const auto& n : d.nodes)
    if (n.process.empty() && first_of.count(n.name))
      fail("nodes[" + std::to_string(n.id) + "].name", "'" + n.name + "' is also the name of a process of other nodes");
  for (uint32_t s = 0; s < d.n_shards(); ++s)
    for (uint32_t r = 0; r < d.replicas; ++r)
      if (!reps.count({s, r}))
        fail("nodes", "shard " + std::to_string(s % d.shards_per_region) + " of region " +
                          std::to_string(s / d.shards_per_region) + " has no replica " + std::to_string(r));
  check_roles(d, spec);
  check_faults(d);
}

Deployment parse_deployment(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError("yaml syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("yaml: ") + e.what());
  }
  if (!root.IsMap()) throw ConfigError("deployment file: expected a mapping at top level");
  check_keys(root, "", {"name", "mode", "regions", "shards_per_region", "replicas", "seed", "link",
                        "workload", "client", "protocols", "runtime", "nodes", "faults"});
  Deployment d;
  if (root["name"]) d.name = str(root["name"], "name");
  if (root["mode"]) d.mode = str(root["mode"], "mode");
  const ProtocolSpec& spec = find_protocol(d.mode);
  auto u32 = [](const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) {
    int64_t v = integer(n, key);
    if (v < lo || v > hi)
      fail(key, std::to_string(v) + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return static_cast<uint32_t>(v);
  };
  if (root["regions"]) d.regions = u32(root["regions"], "regions", 1, 64);
  if (root["shards_per_region"]) d.shards_per_region = u32(root["shards_per_region"], "shards_per_region", 1, 1024);
  if (root["replicas"]) d.replicas = u32(root["replicas"], "replicas", 1, 16);
  if (root["seed"]) d.seed = as<uint64_t>(root["seed"], "seed", "a non-negative integer");

  if (auto l = root["link"]) {
    check_keys(l, "link", {"mechanism", "rtt_ms", "jitter_ms"});
    if (l["mechanism"]) d.link.mechanism = str(l["mechanism"], "link.mechanism");
    if (l["jitter_ms"]) d.link.jitter_ms = num(l["jitter_ms"], "link.jitter_ms");
    if (auto m = l["rtt_ms"]) {
      if (!m.IsSequence()) fail("link.rtt_ms", "expected a list of rows, got " + show(m));
      for (size_t i = 0; i < m.size(); ++i) {
        if (!m[i].IsSequence()) fail("link.rtt_ms", "row " + std::to_string(i) + " is not a list");
        std::vector<double> row;
        for (size_t j = 0; j < m[i].size(); ++j)
          row.push_back(num(m[i][j], "link.rtt_ms[" + std::to_string(i) + "][" + std::to_string(j) + "]"));
        d.link.rtt_ms.push_back(row);
      }
    }
  }
  if (d.link.rtt_ms.empty()) fail("link.rtt_ms", "missing (expected an RxR matrix)");

  if (auto w = root["workload"]) {
    check_keys(w, "workload", {"name", "scale", "mix", "payment_crt_rate", "remote_item_prob",
                               "remote_customer_prob", "by_name_prob", "zipf", "tpca_rows",
                               "tpca_crt_ratio", "district", "append_keys", "append_crt_ratio",
                               "append_read_tail"});
    auto& c = d.workload;
    if (w["name"]) c.name = str(w["name"], "workload.name");
    if (w["scale"]) c.scale = num(w["scale"], "workload.scale");
    if (auto m = w["mix"]) {
      if (!m.IsSequence()) fail("workload.mix", "expected a list of 5 weights, got " + show(m));
      c.mix.clear();
      for (size_t i = 0; i < m.size(); ++i) c.mix.push_back(num(m[i], "workload.mix"));
    }
    if (w["payment_crt_rate"]) c.payment_crt_rate = static_cast<int>(integer(w["payment_crt_rate"], "workload.payment_crt_rate"));
    if (w["remote_item_prob"]) c.remote_item_prob = num(w["remote_item_prob"], "workload.remote_item_prob");
    if (w["remote_customer_prob"]) c.remote_customer_prob = num(w["remote_customer_prob"], "workload.remote_customer_prob");
    if (w["by_name_prob"]) c.by_name_prob = num(w["by_name_prob"], "workload.by_name_prob");
    if (w["zipf"]) c.zipf = num(w["zipf"], "workload.zipf");
    if (w["tpca_rows"]) c.tpca_rows = integer(w["tpca_rows"], "workload.tpca_rows");
    if (w["tpca_crt_ratio"]) c.tpca_crt_ratio = num(w["tpca_crt_ratio"], "workload.tpca_crt_ratio");
    if (w["district"]) c.district = str(w["district"], "workload.district");
    if (w["append_keys"]) c.append_keys = integer(w["append_keys"], "workload.append_keys");
    if (w["append_crt_ratio"]) c.append_crt_ratio = num(w["append_crt_ratio"], "workload.append_crt_ratio");
    if (w["append_read_tail"]) c.append_read_tail = integer(w["append_read_tail"], "workload.append_read_tail");
  }
  if (auto c = root["client"]) {
    check_keys(c, "client", {"n_concurrent", "duration_s", "warmup_s", "cooldown_s",
                             "drain_timeout_s", "retry_limit", "retry_backoff_ms", "retry_backoff_max_ms", "rate_tps",
                             "max_outstanding"});
    auto& k = d.client;
    if (c["n_concurrent"]) k.n_concurrent = u32(c["n_concurrent"], "client.n_concurrent", 1, 100000);
    if (c["duration_s"]) k.duration_s = num(c["duration_s"], "client.duration_s");
    if (c["warmup_s"]) k.warmup_s = num(c["warmup_s"], "client.warmup_s");
    if (c["cooldown_s"]) k.cooldown_s = num(c["cooldown_s"], "client.cooldown_s");
    if (c["drain_timeout_s"]) k.drain_timeout_s = num(c["drain_timeout_s"], "client.drain_timeout_s");
    if (c["retry_limit"]) k.retry_limit = u32(c["retry_limit"], "client.retry_limit", 1, 1000000);
    if (c["retry_backoff_ms"]) k.retry_backoff_ms = num(c["retry_backoff_ms"], "client.retry_backoff_ms");
    if (c["retry_backoff_max_ms"])
      k.retry_backoff_max_ms = num(c["retry_backoff_max_ms"], "client.retry_backoff_max_ms");
    if (c["rate_tps"]) k.rate_tps = num(c["rate_tps"], "client.rate_tps");
    if (c["max_outstanding"])
      k.max_outstanding = u32(c["max_outstanding"], "client.max_outstanding", 1, kMaxOutstanding);
  }
  if (auto x = root["protocols"]) {
    if (!x.IsMap()) fail("protocols", "expected a mapping of protocol names, got " + show(x));
    for (const auto& kv : x) {
      const std::string name = kv.first.Scalar(), where = "protocols." + name;
      const ProtocolSpec& p = find_protocol(name, where);
      if (!kv.second.IsMap()) fail(where, "expected a mapping of options, got " + show(kv.second));
      OptionValues& values = d.protocols[name];
      for (const auto& ov : kv.second) {
        const OptionSpec& o = option_of(p, ov.first.Scalar());
        const std::string key = where + "." + o.name;
        switch (o.type) {  // the type; range and choices are checked by validate()
          case OptionType::Bool: values[o.name] = boolean(ov.second, key); break;
          case OptionType::Int: values[o.name] = integer(ov.second, key); break;
          case OptionType::Double: values[o.name] = num(ov.second, key); break;
          case OptionType::String: values[o.name] = str(ov.second, key); break;
        }
      }
    }
  }
  if (auto x = root["runtime"]) {
    check_keys(x, "runtime", {"connect_timeout_s", "transport", "delivery_grid_us"});
    if (x["connect_timeout_s"]) {
      d.runtime.connect_timeout_s = num(x["connect_timeout_s"], "runtime.connect_timeout_s");
      if (!(d.runtime.connect_timeout_s > 0)) fail("runtime.connect_timeout_s", "must be > 0");
    }
    if (x["transport"]) {
      d.runtime.transport = str(x["transport"], "runtime.transport");
      if (d.runtime.transport != "tcp" && d.runtime.transport != "grpc")
        fail("runtime.transport", "'" + d.runtime.transport + "' is not one of tcp, grpc");
    }
    if (x["delivery_grid_us"]) {
      d.runtime.delivery_grid_us = integer(x["delivery_grid_us"], "runtime.delivery_grid_us");
      if (d.runtime.delivery_grid_us < 0 || d.runtime.delivery_grid_us > 10000)
        fail("runtime.delivery_grid_us", "must be 0-10000 (us; 0: off), got " +
                                             std::to_string(d.runtime.delivery_grid_us));
    }
  }

  auto nodes = root["nodes"];
  if (!nodes) fail("nodes", "missing");
  if (!nodes.IsSequence()) fail("nodes", "expected a list, got " + show(nodes));
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::string key = "nodes[" + std::to_string(i) + "]";
    const auto& y = nodes[i];
    check_keys(y, key, {"name", "kind", "region", "shard", "replica", "host", "port", "process"});
    NodeInfo n;
    n.id = static_cast<NodeId>(i);
    for (const char* req : {"name", "kind", "region", "host", "port"})
      if (!y[req]) fail(key + "." + req, "missing");
    n.name = str(y["name"], key + ".name");
    std::string kind = str(y["kind"], key + ".kind");
    if (kind == "replica") {
      n.kind = NodeKind::Replica;
    } else if (kind == "client") {
      n.kind = NodeKind::Client;
    } else {
      if (!spec.role(kind)) fail(key + ".kind", "'" + kind + "' unknown (expected " + kinds_of(spec) + ")");
      n.kind = NodeKind::Role;
      n.role = kind;
    }
    n.region = u32(y["region"], key + ".region", 0, d.regions - 1);
    if (n.kind != NodeKind::Role) {
      if (!y["shard"]) fail(key + ".shard", "missing");
      int64_t s = integer(y["shard"], key + ".shard");
      if (s < 0 || s >= d.shards_per_region)
        fail(key + ".shard", std::to_string(s) + " not in region " + std::to_string(n.region) +
                                 " (expected 0.." + std::to_string(d.shards_per_region - 1) + ")");
      n.shard = n.region * d.shards_per_region + static_cast<uint32_t>(s);
    }
    if (n.kind == NodeKind::Replica) {
      if (!y["replica"]) fail(key + ".replica", "missing");
      n.replica = u32(y["replica"], key + ".replica", 0, d.replicas - 1);
    }
    n.host = str(y["host"], key + ".host");
    n.port = static_cast<uint16_t>(u32(y["port"], key + ".port", 1, 65535));
    if (y["process"]) {
      n.process = str(y["process"], key + ".process");
      if (n.process.empty()) fail(key + ".process", "must not be empty");
    }
    d.nodes.push_back(n);
  }
  if (auto f = root["faults"]) parse_faults(f, d);
  validate(d);
  return d;
}

Deployment load_deployment(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError(path + ": cannot open deployment file");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return parse_deployment(ss.str());
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

Deployment make_local_deployment(const std::string& mode, uint32_t regions, uint32_t shards_per_region,
                                 uint32_t clients_per_shard, uint16_t base_port) {
  const ProtocolSpec& spec = find_protocol(mode);
  Deployment d;
  d.mode = mode;
  d.regions = regions;
  d.shards_per_region = shards_per_region;
  d.link.rtt_ms.assign(regions, std::vector<double>(regions, 100));
  for (uint32_t r = 0; r < regions; ++r) d.link.rtt_ms[r][r] = 5;
  uint32_t port = base_port;
  auto add = [&](std::string name, NodeKind kind, uint32_t region, uint32_t shard, uint32_t rep) -> NodeInfo& {
    NodeInfo n;
    n.id = static_cast<NodeId>(d.nodes.size());
    n.name = std::move(name);
    n.kind = kind;
    n.region = region;
    n.shard = shard;
    n.replica = rep;
    n.host = "127.0.0.1";
    n.port = static_cast<uint16_t>(port++);
    return d.nodes.emplace_back(std::move(n));
  };
  auto tag = [](uint32_t a, uint32_t b, uint32_t c) {
    return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
  };
  for (uint32_t r = 0; r < regions; ++r)
    for (uint32_t k = 0; k < shards_per_region; ++k)
      for (uint32_t i = 0; i < d.replicas; ++i)
        add("s" + tag(r, k, i), NodeKind::Replica, r, r * shards_per_region + k, i);
  for (const auto& role : spec.roles) {
    const bool per_region = role.placement == Placement::PerRegion;
    for (uint32_t i = 0; i < (per_region ? regions : role.size); ++i) {
      uint32_t region = per_region ? i : group_member_region(i, role.size, regions);
      add(role.prefix + std::to_string(i), NodeKind::Role, region, 0, 0).role = role.name;
    }
  }
  for (uint32_t r = 0; r < regions; ++r)
    for (uint32_t k = 0; k < shards_per_region; ++k)
      for (uint32_t j = 0; j < clients_per_shard; ++j)
        add("c" + tag(r, k, j), NodeKind::Client, r, r * shards_per_region + k, 0);
  return d;
}

}  // namespace txn
