#include "workload/store.h"

namespace txn {

std::unique_ptr<Workload> make_workload(const Deployment& d) {
  if (!(d.workload.scale > 0)) throw ConfigError("workload.scale: must be > 0");
  if (d.workload.name == "tpcc") return wl::make_tpcc(d);
  if (d.workload.name == "tpca") return wl::make_tpca(d);
  if (d.workload.name == "append") return wl::make_append(d);
  throw ConfigError("unknown workload '" + d.workload.name + "' (known: tpcc, tpca, append)");
}

}  // namespace txn
