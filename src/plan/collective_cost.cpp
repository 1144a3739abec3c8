#include "plan/collective_cost.h"

#include <algorithm>

#include "core/error.h"

namespace megatron::plan {

GroupPlacement place_group(int size, int stride, int devices_per_node) {
  GroupPlacement g;
  g.size = size;
  if (size <= 1) return g;
  const int64_t span = int64_t(size - 1) * stride + 1;  // ranks from first to last member
  if (stride >= devices_per_node) {
    g.members_per_node = 1;
    g.spans_nodes = true;
  } else {
    g.members_per_node = std::min(size, std::max(1, devices_per_node / stride));
    g.spans_nodes = span > devices_per_node || g.members_per_node < size;
  }
  return g;
}

double collective_seconds(const Machine& m, Collective op, double bytes, const GroupPlacement& g) {
  if (g.size <= 1 || bytes <= 0) return 0.0;
  const double n = g.size;
  double bandwidth = m.intra_node.bandwidth * m.intra_node.efficiency;
  double latency = m.intra_node.latency;
  if (g.spans_nodes) {
    MT_REQUIRE(m.inter_node.bandwidth > 0, "machine '", m.name,
               "' has no 'network' entry, but this layout puts a ", n,
               "-member group across nodes of ", m.devices_per_node,
               " devices (add the inter-node network to the machine file, or use fewer devices)");
    const double network = m.inter_node.bandwidth * m.inter_node.efficiency *
                           double(g.members_per_node) / double(m.devices_per_node);
    bandwidth = bandwidth > 0 ? std::min(bandwidth, network) : network;
    latency = std::max(latency, m.inter_node.latency);
  }
  MT_REQUIRE(bandwidth > 0, "machine '", m.name, "' has no bandwidth for a ", n,
             "-member group (node.bandwidth_gbps is missing)");
  switch (op) {
    case Collective::kAllReduce:
      return 2 * (n - 1) * latency + 2 * (n - 1) / n * bytes / bandwidth;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (n - 1) * latency + (n - 1) / n * bytes / bandwidth;
    case Collective::kSendRecv:
      return latency + bytes / bandwidth;
  }
  return 0.0;
}

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kReduceScatter:
      return "reduce-scatter";
    case Collective::kAllToAll:
      return "all-to-all";
    case Collective::kSendRecv:
      return "send/recv";
  }
  return "?";
}

}  // namespace megatron::plan
