#include "plan/machine.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace megatron::plan {

namespace {

using nlohmann::json;

constexpr double kGB = 1e9;

// Reads the members of one JSON object, remembering which keys were used so that unknown
// (misspelled) keys can be reported.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, const std::string& origin)
      : object_(object), path_(std::move(path)), origin_(origin) {
    MT_REQUIRE(object.is_object(), "machine file ", origin, ": '", path_, "' must be an object");
  }
  bool has(const char* key) const { return object_.contains(key); }
  std::string where(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  double number(const char* key, double fallback, bool required, bool positive = true) {
    used_.insert(key);
    if (!object_.contains(key)) {
      MT_REQUIRE(!required, "machine file ", origin_, ": missing '", where(key), "'");
      return fallback;
    }
    const json& v = object_.at(key);
    MT_REQUIRE(v.is_number(), "machine file ", origin_, ": '", where(key),
               "' must be a number, got ", v.dump());
    const double x = v.get<double>();
    MT_REQUIRE(positive ? x > 0 : x >= 0, "machine file ", origin_, ": '", where(key), "' must be ",
               positive ? "positive" : ">= 0", ", got ", x);
    return x;
  }
  std::string text(const char* key, bool required) {
    used_.insert(key);
    if (!object_.contains(key)) {
      MT_REQUIRE(!required, "machine file ", origin_, ": missing '", where(key), "'");
      return "";
    }
    MT_REQUIRE(object_.at(key).is_string(), "machine file ", origin_, ": '", where(key),
               "' must be a string");
    return object_.at(key).get<std::string>();
  }
  ObjectReader child(const char* key) {
    used_.insert(key);
    MT_REQUIRE(object_.contains(key), "machine file ", origin_, ": missing '", where(key), "'");
    return ObjectReader(object_.at(key), where(key), origin_);
  }
  void finish() const {
    for (const auto& [key, value] : object_.items())
      MT_REQUIRE(used_.count(key) || key.rfind('_', 0) == 0, "machine file ", origin_,
                 ": unknown key '", where(key.c_str()),
                 "' (keys starting with '_' are comments; see docs/plan.md for the format)");
  }

 private:
  const json& object_;
  std::string path_;
  const std::string& origin_;
  std::set<std::string> used_;
};

ComputeSpec read_compute(ObjectReader r) {
  ComputeSpec c;
  c.peak_flops = r.number("peak_tflops", 0, true) * 1e12;
  c.gemm_efficiency = r.number("gemm_efficiency", 0, true);
  c.gemm_half_dim = r.number("gemm_half_dim", -1, false, false);
  r.finish();
  return c;
}

LinkSpec read_link(ObjectReader& r) {
  LinkSpec l;
  l.bandwidth = r.number("bandwidth_gbps", 0, true) * kGB;
  l.latency = r.number("latency_us", 0, false, false) * 1e-6;
  l.efficiency = r.number("efficiency", 1, false);
  return l;
}

json compute_json(const ComputeSpec& c) {
  return {{"peak_tflops", c.peak_flops / 1e12},
          {"gemm_efficiency", c.gemm_efficiency},
          {"gemm_half_dim", c.gemm_half_dim}};
}

json link_json(const LinkSpec& l) {
  return {{"bandwidth_gbps", l.bandwidth / kGB},
          {"latency_us", l.latency * 1e6},
          {"efficiency", l.efficiency}};
}

}  // namespace

const ComputeSpec& Machine::compute(Precision precision) const {
  const ComputeSpec& c = precision == Precision::kFp32   ? fp32
                         : precision == Precision::kBf16 ? bf16
                                                         : fp16;
  MT_REQUIRE(c.peak_flops > 0, "machine '", name, "' has no '", precision_name(precision),
             "' entry under device.compute: it cannot plan --", precision_name(precision),
             " (add peak_tflops and gemm_efficiency for it, or choose another precision)");
  return c;
}

Machine machine_from_json_text(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    MT_THROW("machine file ", origin, " is not valid JSON: ", e.what());
  }
  Machine m;
  ObjectReader top(root, "", origin);
  m.name = top.text("name", true);
  m.source = top.text("source", false);
  m.overlap_slowdown = top.number("overlap_slowdown", 0, false, false);
  MT_REQUIRE(m.overlap_slowdown < 1, "machine file ", origin, ": 'overlap_slowdown' must be < 1");

  ObjectReader device = top.child("device");
  m.memory_bytes = device.number("memory_gib", 0, true) * kGiB;
  m.reserved_bytes = device.number("reserved_gib", 0, false, false) * kGiB;
  m.memory_bandwidth = device.number("memory_bandwidth_gbps", 0, true) * kGB;
  m.memory_efficiency = device.number("memory_efficiency", 1, false);
  m.kernel_overhead = device.number("kernel_overhead_us", 0, false, false) * 1e-6;
  m.host_op = device.number("host_op_us", 0, false, false) * 1e-6;
  m.host_sync = device.number("host_sync_us", 0, false, false) * 1e-6;
  m.exp_rate = device.number("exp_gelems_per_s", 0, false, false) * 1e9;
  m.random_rate = device.number("random_gelems_per_s", 0, false, false) * 1e9;
  ObjectReader compute = device.child("compute");
  bool any = false;
  for (const char* dtype : {"fp32", "bf16", "fp16"}) {
    if (!compute.has(dtype)) continue;
    ComputeSpec c = read_compute(compute.child(dtype));
    if (c.gemm_half_dim < 0) {  // the operands' roofline (machine.h)
      const double bytes = std::string(dtype) == "fp32" ? 4.0 : 2.0;
      c.gemm_half_dim = c.gemm_efficiency * c.peak_flops * bytes / (2.0 * m.memory_bandwidth);
    }
    (std::string(dtype) == "fp32" ? m.fp32 : std::string(dtype) == "bf16" ? m.bf16 : m.fp16) = c;
    any = true;
  }
  compute.finish();
  MT_REQUIRE(any, "machine file ", origin,
             ": device.compute needs at least one of fp32, bf16, fp16");
  device.finish();

  ObjectReader node = top.child("node");
  m.devices_per_node = int(node.number("devices", 1, true));
  MT_REQUIRE(double(m.devices_per_node) == node.number("devices", 1, true), "machine file ", origin,
             ": 'node.devices' must be a whole number");
  if (m.devices_per_node > 1 || node.has("bandwidth_gbps")) m.intra_node = read_link(node);
  node.finish();
  if (top.has("network")) {
    ObjectReader network = top.child("network");
    m.inter_node = read_link(network);
    network.finish();
  }
  top.finish();
  return m;
}

Machine load_machine(const std::string& path) {
  std::ifstream in(path);
  MT_REQUIRE(in.good(), "cannot read the machine file '", path,
             "' (--machine): give a JSON machine description such as "
             "examples/machines/dgx_a100_80gb.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return machine_from_json_text(buffer.str(), path);
}

std::string machine_to_json_text(const Machine& m) {
  json compute = json::object();
  if (m.fp32.peak_flops > 0) compute["fp32"] = compute_json(m.fp32);
  if (m.bf16.peak_flops > 0) compute["bf16"] = compute_json(m.bf16);
  if (m.fp16.peak_flops > 0) compute["fp16"] = compute_json(m.fp16);
  json device = {{"memory_gib", m.memory_bytes / kGiB},
                 {"reserved_gib", m.reserved_bytes / kGiB},
                 {"memory_bandwidth_gbps", m.memory_bandwidth / kGB},
                 {"memory_efficiency", m.memory_efficiency},
                 {"compute", compute}};
  if (m.kernel_overhead > 0) device["kernel_overhead_us"] = m.kernel_overhead * 1e6;
  if (m.host_op > 0) device["host_op_us"] = m.host_op * 1e6;
  if (m.host_sync > 0) device["host_sync_us"] = m.host_sync * 1e6;
  if (m.exp_rate > 0) device["exp_gelems_per_s"] = m.exp_rate / 1e9;
  if (m.random_rate > 0) device["random_gelems_per_s"] = m.random_rate / 1e9;
  json node = {{"devices", m.devices_per_node}};
  if (m.intra_node.bandwidth > 0) node.update(link_json(m.intra_node));
  json root = {{"name", m.name}, {"source", m.source}, {"device", device}, {"node", node}};
  if (m.inter_node.bandwidth > 0) root["network"] = link_json(m.inter_node);
  if (m.overlap_slowdown > 0) root["overlap_slowdown"] = m.overlap_slowdown;
  return root.dump(2) + "\n";
}

}  // namespace megatron::plan
