// Protocol options: the schema a protocol registers (name, type, default,
// range or choices, help) and the typed view a protocol reads its values
// through. The deployment file carries them under `protocols: {<name>: {...}}`
// (docs/deploy-schema.md); they are checked against the schema once, at load.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace txn {

enum class OptionType { Bool, Int, Double, String };
const char* type_name(OptionType t);  // "bool" | "int" | "double" | "string" (the registry JSON's names)

using OptionValue = std::variant<bool, int64_t, double, std::string>;
using OptionValues = std::map<std::string, OptionValue>;  // option name -> value

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::Bool;
  OptionValue default_value;
  // Int and Double: inclusive bounds.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // String: the allowed values (empty: any string)
  std::string help;                  // one line

  static OptionSpec flag(std::string name, bool def, std::string help);
  static OptionSpec integer(std::string name, int64_t def, int64_t min, int64_t max, std::string help);
  static OptionSpec number(std::string name, double def, double min, double max, std::string help);
  static OptionSpec text(std::string name, std::string def, std::vector<std::string> choices, std::string help);

  // What is wrong with `v` for this option ("expected an integer, got 2.5",
  // "7 out of range [1, 3]"), or "" when it is acceptable.
  std::string problem(const OptionValue& v) const;
};

// "true", "42", "0.25", "tpcc": a value as the deployment file and errors show it.
std::string show(const OptionValue& v);

// A protocol's options as it reads them: every option of its schema, set from
// the deployment or else its default. Asking for a name the schema lacks, or
// with the wrong type, is a programming error (std::logic_error).
class ProtocolOptions {
 public:
  // `set` must already be valid for `schema` (the deployment loader checks it).
  ProtocolOptions(const std::vector<OptionSpec>& schema, const OptionValues& set);
  bool flag(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  const std::string& text(const std::string& name) const;

 private:
  template <class T>
  const T& get(const std::string& name) const;
  OptionValues values_;
};

}  // namespace txn
