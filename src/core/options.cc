#include "options.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace txn {
namespace {

std::string shortest(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

const char* type_name(OptionType t) {
  switch (t) {
    case OptionType::Bool: return "bool";
    case OptionType::Int: return "int";
    case OptionType::Double: return "double";
    case OptionType::String: return "string";
  }
  return "?";
}

std::string show(const OptionValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return shortest(*d);
  return std::get<std::string>(v);
}

OptionSpec OptionSpec::flag(std::string name, bool def, std::string help) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = OptionType::Bool;
  s.default_value = def;
  s.help = std::move(help);
  return s;
}

OptionSpec OptionSpec::integer(std::string name, int64_t def, int64_t min, int64_t max, std::string help) {
  OptionSpec s = flag(std::move(name), false, std::move(help));
  s.type = OptionType::Int;
  s.default_value = def;
  s.min = static_cast<double>(min);
  s.max = static_cast<double>(max);
  return s;
}

OptionSpec OptionSpec::number(std::string name, double def, double min, double max, std::string help) {
  OptionSpec s = flag(std::move(name), false, std::move(help));
  s.type = OptionType::Double;
  s.default_value = def;
  s.min = min;
  s.max = max;
  return s;
}

OptionSpec OptionSpec::text(std::string name, std::string def, std::vector<std::string> choices,
                            std::string help) {
  OptionSpec s = flag(std::move(name), false, std::move(help));
  s.type = OptionType::String;
  s.default_value = std::move(def);
  s.choices = std::move(choices);
  return s;
}

std::string OptionSpec::problem(const OptionValue& v) const {
  static const char* expected[] = {"true or false", "an integer", "a number", "a string"};
  const size_t want = static_cast<size_t>(type);
  if (v.index() != want) return std::string("expected ") + expected[want] + ", got " + show(v);
  if (type == OptionType::Int || type == OptionType::Double) {
    double x = type == OptionType::Int ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
    if (!std::isfinite(x)) return "expected a finite number, got " + show(v);
    if (!(x >= min && x <= max))
      return show(v) + " out of range [" + shortest(min) + ", " + shortest(max) + "]";
  }
  if (type == OptionType::String && !choices.empty()) {
    const auto& s = std::get<std::string>(v);
    std::string list;
    for (const auto& c : choices) {
      if (c == s) return "";
      list += (list.empty() ? "" : "|") + c;
    }
    return "'" + s + "' unknown (expected " + list + ")";
  }
  return "";
}

ProtocolOptions::ProtocolOptions(const std::vector<OptionSpec>& schema, const OptionValues& set) {
  for (const auto& o : schema) {
    auto it = set.find(o.name);
    values_.emplace(o.name, it == set.end() ? o.default_value : it->second);
  }
}

template <class T>
const T& ProtocolOptions::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("protocol option '" + name + "' is not in the schema");
  const T* v = std::get_if<T>(&it->second);
  if (!v) throw std::logic_error("protocol option '" + name + "' read with the wrong type");
  return *v;
}

bool ProtocolOptions::flag(const std::string& name) const { return get<bool>(name); }
int64_t ProtocolOptions::integer(const std::string& name) const { return get<int64_t>(name); }
double ProtocolOptions::number(const std::string& name) const { return get<double>(name); }
const std::string& ProtocolOptions::text(const std::string& name) const { return get<std::string>(name); }

}  // namespace txn
