// Device: where a tensor's storage lives (cpu, or cuda:N).
// Parsing accepts "cpu", "cuda" (= cuda:0) and "cuda:N".
#pragma once
#include <optional>
#include <string>

namespace trident {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static std::optional<Device> parse(const std::string& s);
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace trident
