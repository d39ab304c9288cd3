#include "protocol.h"
#include "protocols/dast/dast.h"

namespace txn {

const std::vector<std::string>& built_modes() {
  static const std::vector<std::string> modes = {"dast"};
  return modes;
}

const ProtocolFactory& protocol_factory(const std::string& mode) {
  if (mode == "dast") return dast::factory();
  if (mode == "janus" || mode == "tapir" || mode == "slog")
    throw ConfigError("mode '" + mode + "' is not built yet (built: dast)");
  throw ConfigError("unknown mode '" + mode + "' (known: dast, janus, tapir, slog)");
}

}  // namespace txn
