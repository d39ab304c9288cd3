// DAST's registration (src/protocols/protocols.inc): roles, options, factories.
#include "protocols/dast/dast.h"

namespace txn::dast {

Options::Options(const Deployment& d) {
  const ProtocolOptions o = protocol_options(d);
  sync_interval_ms = o.number("sync_interval_ms");
  anticipation_margin_ms = o.number("anticipation_margin_ms");
  ewma_alpha = o.number("ewma_alpha");
  held_sample_factor = o.number("held_sample_factor");
  defer_commutative = o.flag("defer_commutative");
}

ProtocolSpec spec() {
  ProtocolSpec p;
  p.name = "dast";
  p.summary = "decentralized anticipate-and-stretch: IRTs order below every undecided CRT and never wait for one";
  p.min_regions = 1;
  p.guarantee = "serializable";  // the paper claims serializability; real time is not kept (docs/protocols/dast.md)
  p.reports_copies = true;   // an IRT's stored copies, a CRT's proposals
  p.order_key = "the transaction's timestamp (t, c): an IRT's as its handler issued it, a CRT's decision; one domain";
  p.roles = {{kManagerRole, "m", Placement::PerRegion, 1,
              "anticipates a CRT's timestamp for its region and fans the CRT out to the region's sites",
              [](const Deployment& d, NodeId id) -> std::unique_ptr<Node> { return std::make_unique<Manager>(d, id); }}};
  p.options = {
      OptionSpec::number("sync_interval_ms", 50, 0.1, 60000,
                         "safety net: how often a site re-checks its queue and waiting clock requests"),
      OptionSpec::number("anticipation_margin_ms", 0, -1000, 1000,
                         "added to the measured decision delay (earlier costs stretch, later costs CRT wait)"),
      OptionSpec::number("ewma_alpha", 0.2, 0, 1, "smoothing of the measured per-region delays"),
      OptionSpec::number("held_sample_factor", 3, 0, 1000,
                         "a prepare round trip above this x the estimate is believed only once a prepare sent after "
                         "it came back is as slow (a partition's held replies are not; 0: every sample, plain EWMA)"),
      OptionSpec::flag("defer_commutative", true,
                       "run a commutative piece waiting for a cross-region value when it arrives instead of "
                       "holding the region's clocks below the CRT (false: the artifact's hold)"),
  };
  p.make_replica = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<ReplicaNode> {
    return std::make_unique<Replica>(d, id, w);
  };
  p.make_client_driver = [](const Deployment& d, NodeId id) -> std::unique_ptr<ClientDriver> {
    (void)id;
    return std::make_unique<HandlerClientDriver>(d, "DAST");
  };
  p.make_voter = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<txn::Voter> {
    return std::make_unique<Voter>(d, id, w);
  };
  return p;
}

}  // namespace txn::dast
