// The protocol registry (src/core/protocol.h): the built-in protocols of
// protocols.inc plus any registered at run time, and their JSON form.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "core/json.h"
#include "protocol.h"

#define PROTOCOL(name) \
  namespace txn::name { \
  ProtocolSpec spec(); \
  }
#include "protocols/protocols.inc"
#undef PROTOCOL

namespace txn {
namespace {

struct Registry {
  std::vector<std::unique_ptr<ProtocolSpec>> specs;  // unique_ptr: references stay valid as it changes
  size_t n_built_in = 0;
};

bool valid_name(const std::string& s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// A spec the rest of the system can rely on; a broken one is a programming error.
void check_spec(const Registry& reg, const ProtocolSpec& p) {
  auto bad = [&](const std::string& why) { throw std::logic_error("protocol '" + p.name + "': " + why); };
  if (!valid_name(p.name)) bad("name must match [a-z][a-z0-9_]*");
  for (const auto& q : reg.specs)
    if (q->name == p.name) bad("registered twice");
  if (p.summary.empty()) bad("no summary");
  if (!p.make_replica || !p.make_client_driver) bad("needs make_replica and make_client_driver");
  if (p.min_regions < 1) bad("min_regions must be >= 1");
  const auto& g = guarantees();
  if (std::find(g.begin(), g.end(), p.guarantee) == g.end())
    bad("guarantee '" + p.guarantee + "' must be serializable or strict_serializable");
  if (p.order_key.find('\n') != std::string::npos) bad("order_key must be one line");
  for (size_t i = 0; i < p.roles.size(); ++i) {
    const RoleSpec& r = p.roles[i];
    if (!valid_name(r.name) || r.name == "replica" || r.name == "client")
      bad("role name '" + r.name + "' must match [a-z][a-z0-9_]* and not be replica or client");
    if (r.prefix.empty() || r.prefix == "s" || r.prefix == "c") bad("role " + r.name + ": prefix must not be empty, s or c");
    if (!r.make) bad("role " + r.name + " has no factory");
    if (r.placement == Placement::PerRegion && r.size != 1) bad("role " + r.name + ": per-region roles have size 1");
    if (r.placement == Placement::Group && (r.size < 1 || r.size > p.min_regions))
      bad("role " + r.name + ": a group of " + std::to_string(r.size) + " in distinct regions needs 1 <= size <= min_regions");
    for (size_t j = 0; j < i; ++j)
      if (p.roles[j].name == r.name || p.roles[j].prefix == r.prefix) bad("role " + r.name + ": name or prefix taken");
  }
  for (size_t i = 0; i < p.options.size(); ++i) {
    const OptionSpec& o = p.options[i];
    if (!valid_name(o.name)) bad("option name '" + o.name + "' must match [a-z][a-z0-9_]*");
    if (o.help.empty()) bad("option " + o.name + " has no help");
    std::string why = o.problem(o.default_value);
    if (!why.empty()) bad("option " + o.name + ": default: " + why);
    for (size_t j = 0; j < i; ++j)
      if (p.options[j].name == o.name) bad("option " + o.name + " declared twice");
  }
}

Registry& registry() {
  static Registry reg = [] {
    Registry r;
    auto add = [&r](ProtocolSpec s) {
      check_spec(r, s);
      r.specs.push_back(std::make_unique<ProtocolSpec>(std::move(s)));
    };
#define PROTOCOL(name) add(name::spec());
#include "protocols/protocols.inc"
#undef PROTOCOL
    r.n_built_in = r.specs.size();
    return r;
  }();
  return reg;
}

std::string json_double(double v) {
  char buf[32];
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;  // keep it a float in JSON
}

std::string json_value(const OptionValue& v) {
  if (auto* d = std::get_if<double>(&v)) return json_double(*d);
  if (auto* s = std::get_if<std::string>(&v)) return json_string(*s);
  return show(v);  // bool, int
}

std::string json_bound(const OptionSpec& o, double b) {
  return o.type == OptionType::Int ? std::to_string(static_cast<int64_t>(b)) : json_double(b);
}

}  // namespace

const char* placement_name(Placement p) { return p == Placement::PerRegion ? "per_region" : "group"; }

uint32_t group_member_region(uint32_t member, uint32_t size, uint32_t regions) {
  return static_cast<uint32_t>(uint64_t{member} * regions / size);
}

const RoleSpec* ProtocolSpec::role(const std::string& n) const {
  for (const auto& r : roles)
    if (r.name == n) return &r;
  return nullptr;
}

const OptionSpec* ProtocolSpec::option(const std::string& n) const {
  for (const auto& o : options)
    if (o.name == n) return &o;
  return nullptr;
}

const ProtocolSpec* lookup_protocol(const std::string& name) {
  for (const auto& p : registry().specs)
    if (p->name == name) return p.get();
  return nullptr;
}

std::vector<std::string> protocol_names() {
  std::vector<std::string> out;
  for (const auto& p : registry().specs) out.push_back(p->name);
  return out;
}

const ProtocolSpec& find_protocol(const std::string& name, const std::string& key) {
  if (const ProtocolSpec* p = lookup_protocol(name)) return *p;
  std::string built;
  for (const auto& n : protocol_names()) built += (built.empty() ? "" : ", ") + n;
  throw ConfigError(key + ": " + (name.empty() ? "missing" : "'" + name + "' unknown") + " (built: " + built + ")");
}

std::vector<std::string> built_in_protocols() {
  return {
#define PROTOCOL(name) #name,
#include "protocols/protocols.inc"
#undef PROTOCOL
  };
}

void register_protocol(ProtocolSpec spec) {
  Registry& reg = registry();
  check_spec(reg, spec);
  reg.specs.push_back(std::make_unique<ProtocolSpec>(std::move(spec)));
}

void unregister_protocol(const std::string& name) {
  Registry& reg = registry();
  for (size_t i = 0; i < reg.specs.size(); ++i) {
    if (reg.specs[i]->name != name) continue;
    if (i < reg.n_built_in) throw std::logic_error("protocol '" + name + "' is built in");
    reg.specs.erase(reg.specs.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
  throw std::logic_error("protocol '" + name + "' is not registered");
}

ProtocolOptions protocol_options(const Deployment& d) {
  auto it = d.protocols.find(d.mode);
  return ProtocolOptions(find_protocol(d.mode).options, it == d.protocols.end() ? OptionValues{} : it->second);
}

std::string registry_json() {
  std::string o = "{\n  \"format\": 1,\n  \"protocols\": [";
  const auto& specs = registry().specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ProtocolSpec& p = *specs[i];
    o += std::string(i ? "," : "") + "\n    {\n      \"name\": " + json_string(p.name) +
         ",\n      \"summary\": " + json_string(p.summary) +
         ",\n      \"min_regions\": " + std::to_string(p.min_regions) +
         ",\n      \"guarantee\": " + json_string(p.guarantee) + ",\n      \"order_key\": " + json_string(p.order_key) +
         ",\n      \"reports_copies\": " + (p.reports_copies ? "true" : "false") +
         ",\n      \"roles\": [";
    for (size_t j = 0; j < p.roles.size(); ++j) {
      const RoleSpec& r = p.roles[j];
      o += std::string(j ? "," : "") + "\n        {\"name\": " + json_string(r.name) +
           ", \"prefix\": " + json_string(r.prefix) + ", \"placement\": \"" + placement_name(r.placement) +
           "\", \"size\": " + std::to_string(r.size) + ", \"help\": " + json_string(r.help) + "}";
    }
    o += std::string(p.roles.empty() ? "" : "\n      ") + "],\n      \"options\": [";
    for (size_t j = 0; j < p.options.size(); ++j) {
      const OptionSpec& x = p.options[j];
      o += std::string(j ? "," : "") + "\n        {\"name\": " + json_string(x.name) + ", \"type\": \"" +
           type_name(x.type) + "\", \"default\": " + json_value(x.default_value);
      if (std::isfinite(x.min)) o += ", \"min\": " + json_bound(x, x.min);
      if (std::isfinite(x.max)) o += ", \"max\": " + json_bound(x, x.max);
      if (x.type == OptionType::String) {
        o += ", \"choices\": [";
        for (size_t k = 0; k < x.choices.size(); ++k) o += (k ? ", " : "") + json_string(x.choices[k]);
        o += "]";
      }
      o += ", \"help\": " + json_string(x.help) + "}";
    }
    o += std::string(p.options.empty() ? "" : "\n      ") + "]\n    }";
  }
  return o + (specs.empty() ? "" : "\n  ") + "]\n}\n";
}

}  // namespace txn
