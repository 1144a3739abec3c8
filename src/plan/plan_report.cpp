#include "plan/plan_report.h"

#include <cstdarg>
#include <cstdio>

#include "core/error.h"
#include "plan/machine.h"

namespace megatron::plan {

namespace {

using nlohmann::json;

std::string fmt(const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

std::string count(double n) {
  if (n >= 1e9) return fmt("%.2f B", n / 1e9);
  if (n >= 1e6) return fmt("%.1f M", n / 1e6);
  return fmt("%.0f", n);
}

std::string bytes(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.1f MB", b / 1e6);
  return fmt("%.1f kB", b / 1e3);
}

std::string ms(double seconds) {
  return fmt("%.1f ms", seconds * 1e3);
}

std::string model_line(const ModelSpec& m, int tp) {
  std::string s =
      fmt("%s: %lld layers, hidden %lld, %lld heads", family_name(m.family),
          (long long)m.num_layers, (long long)m.hidden_size, (long long)m.num_attention_heads);
  if (m.query_groups() != m.num_attention_heads)
    s += fmt(" (%lld query groups)", (long long)m.query_groups());
  s += fmt(", FFN %lld%s, sequence %lld, vocabulary %lld (padded %lld)", (long long)m.ffn_size(),
           m.arch.swiglu ? " SwiGLU" : "", (long long)m.seq_length, (long long)m.vocab_size,
           (long long)m.padded_vocab(tp));
  if (m.norm_order() != NormOrder::kPre) s += fmt(", %s", norm_order_name(m.norm_order()));
  return s;
}

std::string machine_line(const Machine& m, Implementation impl) {
  return fmt("machine: %s (%d device%s per node, %.1f GiB each); implementation %s", m.name.c_str(),
             m.devices_per_node, m.devices_per_node == 1 ? "" : "s", m.memory_bytes / kGiB,
             implementation_name(impl));
}

json rank_json(const RankMemory& r) {
  return {{"parameters", r.parameters},     {"expert_parameters", r.expert_parameters},
          {"weights_bytes", r.weights},     {"gradients_bytes", r.gradients},
          {"optimizer_bytes", r.optimizer}, {"activations_bytes", r.activations},
          {"workspace_bytes", r.workspace}, {"step_buffers_bytes", r.step_buffers},
          {"reserved_bytes", r.reserved},   {"total_bytes", r.total()}};
}

json layout_json(const Layout& l) {
  return {{"tensor_model_parallel_size", l.tensor_parallel},
          {"pipeline_model_parallel_size", l.pipeline_parallel},
          {"context_parallel_size", l.context_parallel},
          {"cp_comm_type", cp_comm_type_name(l.cp_comm)},
          {"data_parallel_size", l.data_parallel},
          {"expert_model_parallel_size", l.expert_parallel},
          {"expert_tensor_parallel_size", l.expert_tp()},
          {"expert_data_parallel_size", l.expert_data_parallel()},
          {"moe_token_dispatcher_type",
           l.dispatcher == TokenDispatcher::kAllToAll ? "alltoall" : "allgather"},
          {"virtual_pipeline_model_parallel_size", l.virtual_stages},
          {"world_size", l.world_size()},
          {"micro_batch_size", l.micro_batch},
          {"global_batch_size", l.effective_global_batch()},
          {"num_micro_batches", l.num_micro_batches()},
          {"recompute", recompute_name(l.recompute)},
          {"recompute_block_layers", l.recompute_block_layers},
          {"recompute_layernorm", l.recompute_layernorm},
          {"recompute_mlp", l.recompute_mlp},
          {"sequence_parallel", l.sequence_parallel},
          {"use_distributed_optimizer", l.distributed_optimizer},
          {"precision", precision_name(l.precision)},
          {"overlap_grad_reduce", l.overlap_grad_reduce},
          {"overlap_param_gather", l.overlap_param_gather},
          {"tp_comm_overlap", l.tp_comm_overlap},
          {"use_flash_attn", l.flash_attention}};
}

json time_json(const StepTime& t) {
  json comm = json::array();
  auto add = [&](const std::vector<CommTerm>& terms, const char* where) {
    for (const CommTerm& c : terms)
      comm.push_back({{"name", c.name},
                      {"where", where},
                      {"op", collective_name(c.op)},
                      {"bytes", c.bytes},
                      {"calls", c.calls},
                      {"seconds", c.seconds},
                      {"overlapped_seconds", c.overlapped}});
  };
  add(t.microbatch.layer_comm, "per layer");
  add(t.microbatch.layer_cp_comm, "per layer, context parallel");
  add(t.microbatch.layer_ep_comm, "per layer, expert parallel");
  add(t.microbatch.embedding_comm, "embedding");
  add(t.microbatch.output_comm, "output layer");
  return {{"per_micro_batch",
           {{"forward_seconds", t.forward},
            {"backward_seconds", t.backward},
            {"recompute_seconds", t.recompute},
            {"gemm_seconds", t.gemm},
            {"memory_bound_seconds", t.memory_bound},
            {"tp_comm_seconds", t.tp_comm},
            {"tp_comm_exposed_seconds", t.tp_exposed},
            {"cp_comm_seconds", t.cp_comm},
            {"cp_comm_exposed_seconds", t.cp_exposed},
            {"ep_comm_seconds", t.ep_comm},
            {"pp_p2p_seconds", t.pp_p2p},
            {"stage_seconds", t.stage},
            {"tp_collectives", comm}}},
          {"micro_batches", t.micro_batches},
          {"pipeline_seconds", t.pipeline},
          {"bubble_seconds", t.bubble},
          {"dp_comm_seconds", t.dp_comm},
          {"dp_comm_exposed_seconds", t.dp_exposed},
          {"embedding_sync_seconds", t.embedding_sync},
          {"sequence_parallel_sync_seconds", t.sequence_parallel_sync},
          {"optimizer_seconds", t.optimizer},
          {"step_seconds", t.step},
          {"model_flops_per_iteration", t.flops.model},
          {"hardware_flops_per_iteration", t.flops.hardware},
          {"tokens_per_second", t.tokens_per_second},
          {"model_tflops_per_device", t.model_tflops_per_device},
          {"hardware_tflops_per_device", t.hardware_tflops_per_device},
          {"mfu", t.mfu}};
}

std::string layout_short(const Layout& l) {
  // Block recompute shows its layers per chunk: "block 16".
  const std::string recompute = l.recompute == Recompute::kFull && l.recompute_block_layers > 0
                                    ? "block " + std::to_string(l.recompute_block_layers)
                                    : recompute_name(l.recompute);
  return fmt("%3d %3d %3d %4d %3d %3d %2d %3lld %-9s %-3s %-4s", l.tensor_parallel,
             l.context_parallel, l.pipeline_parallel, l.data_parallel, l.expert_parallel,
             l.expert_tp(), l.virtual_stages, (long long)l.micro_batch, recompute.c_str(),
             l.sequence_parallel ? "yes" : "no", l.distributed_optimizer ? "yes" : "no");
}

}  // namespace

Plan make_plan(const ModelSpec& model, const Layout& layout, const Machine& machine,
               Implementation impl, double headroom) {
  validate_model(model);
  validate_layout(model, layout, impl);
  MT_REQUIRE(headroom >= 0 && headroom < 1, "--memory-headroom must be in [0, 1), got ", headroom);
  Plan p{model, layout, impl, machine, {}, {}, headroom};
  p.memory = estimate_memory(model, layout, machine, impl);
  p.time = predict_step_time(model, layout, machine, impl);
  return p;
}

std::string format_plan(const Plan& p) {
  const Layout& l = p.layout;
  const MemoryEstimate& mem = p.memory;
  const StepTime& t = p.time;
  std::string o;
  o += "megatron plan: " + model_line(p.model, l.tensor_parallel) + "\n";
  o += fmt("  %s parameters\n", count(mem.parameters.total).c_str());
  o += machine_line(p.machine, p.impl) + "\n";
  o += fmt("layout: %s; %d devices, %lld micro-batches per iteration\n", l.describe().c_str(),
           l.world_size(), (long long)l.num_micro_batches());

  const bool two = l.pipeline_parallel > 1;
  const bool small = mem.peak() < kGiB;  // small models read better in MiB
  const double unit = small ? kGiB / 1024 : kGiB;
  const char* unit_name = small ? "MiB" : "GiB";
  o += two ? fmt("\nmemory per device (%s)            first stage   last stage\n", unit_name)
           : fmt("\nmemory per device (%s)\n", unit_name);
  auto row = [&](const char* name, double a, double b) {
    o += two ? fmt("  %-30s %11.2f  %11.2f\n", name, a / unit, b / unit)
             : fmt("  %-30s %11.2f\n", name, a / unit);
  };
  o +=
      two ? fmt("  %-30s %11s  %11s\n", "parameters on the rank",
                count(mem.first_stage.parameters).c_str(), count(mem.last_stage.parameters).c_str())
          : fmt("  %-30s %11s\n", "parameters on the rank",
                count(mem.first_stage.parameters).c_str());
  const bool moe = p.model.arch.moe.enabled();
  if (moe) {
    const std::string shard =
        fmt("  of which experts (EP %d x ETP %d)", l.expert_parallel, l.expert_tp());
    o += two ? fmt("  %-30s %11s  %11s\n", shard.c_str(),
                   count(mem.first_stage.expert_parameters).c_str(),
                   count(mem.last_stage.expert_parameters).c_str())
             : fmt("  %-30s %11s\n", shard.c_str(),
                   count(mem.first_stage.expert_parameters).c_str());
  }
  const BytesPerParameter& bpp = mem.bytes_per_parameter;
  row(fmt("weights (%.3g B/param)", bpp.weights).c_str(), mem.first_stage.weights,
      mem.last_stage.weights);
  row(fmt("gradients (%.3g B/param)", bpp.gradients).c_str(), mem.first_stage.gradients,
      mem.last_stage.gradients);
  row((moe ? fmt("optimizer state (%.3g, experts %.3g B/param)", bpp.optimizer,
                 bpp.expert_optimizer)
           : fmt("optimizer state (%.3g B/param)", bpp.optimizer))
          .c_str(),
      mem.first_stage.optimizer, mem.last_stage.optimizer);
  row(fmt("activations (%.3g micro-batches)", mem.activations.in_flight).c_str(),
      mem.first_stage.activations, mem.last_stage.activations);
  row("workspace (transient)", mem.first_stage.workspace, mem.last_stage.workspace);
  if (mem.first_stage.step_buffers > 0 || mem.last_stage.step_buffers > 0)
    row("optimizer step (transient)", mem.first_stage.step_buffers, mem.last_stage.step_buffers);
  row("reserved (runtime)", mem.first_stage.reserved, mem.last_stage.reserved);
  row("total", mem.first_stage.total(), mem.last_stage.total());
  const double capacity = p.machine.memory_bytes;
  o += fmt("  peak %.2f GiB of %.2f GiB (%.0f%%%s): %s\n", mem.peak() / kGiB, capacity / kGiB,
           100.0 * mem.peak() / capacity,
           p.headroom > 0 ? fmt(", keeping %.0f%% free", 100 * p.headroom).c_str() : "",
           p.fits() ? "fits" : "DOES NOT FIT (see --search for layouts that do)");
  o += fmt("  activations per layer and micro-batch: %s\n",
           bytes(mem.activations.per_layer).c_str());
  if (moe)
    o +=
        fmt("  of a MoE layer: %s (router, permuted rows, experts' fc1 / activation / fc2 at "
            "%s rows, token exchange); expert-data-parallel size %d\n",
            bytes(mem.activations.per_moe_layer).c_str(),
            count(mem.activations.expert_rows).c_str(), l.expert_data_parallel());

  o += "\ntime per iteration\n";
  o += "  one micro-batch on the slowest stage:\n";
  o += fmt("    %-28s %12s\n", "forward", ms(t.forward).c_str());
  o += fmt("    %-28s %12s  (recompute %s included)\n", "backward", ms(t.backward).c_str(),
           ms(t.recompute).c_str());
  o += fmt("    %-28s %12s  GEMM, %s memory-bound kernels\n", "  forward + backward",
           ms(t.gemm).c_str(), ms(t.memory_bound).c_str());
  o += fmt("    %-28s %12s  issued, %s exposed\n", "tensor-parallel collectives",
           ms(t.tp_comm).c_str(), ms(t.tp_exposed).c_str());
  auto comm_rows = [&](const std::vector<CommTerm>& terms, double per, const char* where) {
    for (const CommTerm& c : terms)
      o += fmt("      %-44s %5.3g x %9s %10s%s%s\n", c.name.c_str(), c.calls * per,
               bytes(c.bytes).c_str(), ms(c.seconds * per).c_str(),
               c.overlapped > 0 ? fmt(" (%s hidden)", ms(c.overlapped * per).c_str()).c_str() : "",
               where);
  };
  const bool pp = l.pipeline_parallel > 1;
  comm_rows(t.microbatch.layer_comm, l.max_rank_layers(p.model.num_layers), "");
  if (l.context_parallel > 1) {
    o += fmt("    %-28s %12s  issued, %s exposed\n", "context-parallel attention",
             ms(t.cp_comm).c_str(), ms(t.cp_exposed).c_str());
    comm_rows(t.microbatch.layer_cp_comm, l.max_rank_layers(p.model.num_layers), "");
  }
  if (!t.microbatch.layer_ep_comm.empty()) {
    o += fmt("    %-28s %12s  issued and exposed\n", "MoE token exchange", ms(t.ep_comm).c_str());
    comm_rows(t.microbatch.layer_ep_comm, l.max_rank_layers(p.model.num_layers), "");
  }
  comm_rows(t.microbatch.embedding_comm, 1, pp ? " [first stage]" : "");
  comm_rows(t.microbatch.output_comm, 1, pp ? " [last stage]" : "");
  if (l.pipeline_parallel > 1)
    o += fmt("    %-28s %12s\n", "pipeline send/recv", ms(t.pp_p2p).c_str());
  o += fmt("    %-28s %12s\n", "stage total", ms(t.stage).c_str());
  o += fmt("  %-30s %12s  (%lld x %s + bubble %s, %.1f%%)\n", "pipeline", ms(t.pipeline).c_str(),
           (long long)t.micro_batches, ms(t.stage).c_str(), ms(t.bubble).c_str(),
           100.0 * t.bubble / t.step);
  if (l.gradient_group() > 1)
    o += fmt("  %-30s %12s  exposed of %s issued (%s%s)\n", "data-parallel gradients",
             ms(t.dp_exposed).c_str(), ms(t.dp_comm).c_str(),
             l.distributed_optimizer ? "reduce-scatter + parameter all-gather" : "all-reduce",
             l.overlap_grad_reduce ? ", overlapped with backward" : ", after backward");
  if (t.embedding_sync > 0)
    o += fmt("  %-30s %12s\n", "tied embedding all-reduce", ms(t.embedding_sync).c_str());
  if (t.sequence_parallel_sync > 0)
    o += fmt("  %-30s %12s  (norm and bias gradients, over TP)\n", "sequence-parallel all-reduce",
             ms(t.sequence_parallel_sync).c_str());
  o += fmt("  %-30s %12s\n", "optimizer step", ms(t.optimizer).c_str());
  o += fmt("  %-30s %12s\n", "step", ms(t.step).c_str());
  const double peak = p.machine.compute(gemm_precision(l, p.impl)).peak_flops / 1e12;
  o += fmt("\nthroughput: %.4g tokens/s; %.4g TFLOP/s per device (model FLOPs, MFU %.1f%% of %.4g)",
           t.tokens_per_second, t.model_tflops_per_device, 100.0 * t.mfu, peak);
  if (t.flops.hardware != t.flops.model)
    o += fmt(", %.4g with recomputed FLOPs", t.hardware_tflops_per_device);
  o += "\n";
  return o;
}

json plan_to_json(const Plan& p) {
  return {{"model",
           {{"family", family_name(p.model.family)},
            {"num_layers", p.model.num_layers},
            {"hidden_size", p.model.hidden_size},
            {"num_attention_heads", p.model.num_attention_heads},
            {"num_query_groups", p.model.query_groups()},
            {"ffn_hidden_size", p.model.ffn_size()},
            {"seq_length", p.model.seq_length},
            {"padded_vocab_size", p.model.padded_vocab(p.layout.tensor_parallel)},
            {"layernorm_order", norm_order_name(p.model.norm_order())},
            {"parameters", p.memory.parameters.total}}},
          {"machine", p.machine.name},
          {"implementation", implementation_name(p.impl)},
          {"layout", layout_json(p.layout)},
          {"memory",
           {{"first_stage", rank_json(p.memory.first_stage)},
            {"last_stage", rank_json(p.memory.last_stage)},
            {"activation_bytes_per_layer", p.memory.activations.per_layer},
            {"activation_bytes_per_moe_layer", p.memory.activations.per_moe_layer},
            {"in_flight_micro_batches", p.memory.activations.in_flight},
            {"peak_bytes", p.memory.peak()},
            {"device_bytes", p.machine.memory_bytes},
            {"headroom", p.headroom},
            {"fits", p.fits()}}},
          {"time", time_json(p.time)}};
}

std::string format_search(const ModelSpec& model, const Machine& machine, Implementation impl,
                          int devices, const SearchResult& r, double headroom) {
  std::string o = "megatron plan --search: " + model_line(model, 1) + "\n";
  o += machine_line(machine, impl) + "\n";
  o += fmt("%d devices: %lld layouts evaluated, %lld fit in %.1f GiB%s\n", devices,
           (long long)r.evaluated, (long long)r.fitting,
           machine.memory_bytes * (1 - headroom) / kGiB,
           headroom > 0 ? fmt(" (%.0f%% headroom kept)", 100 * headroom).c_str() : "");
  if (r.best.empty()) {
    o += fmt("no layout fits; the smallest needs %.2f GiB per device: %s\n",
             r.smallest.memory.peak() / kGiB, r.smallest.layout.describe().c_str());
    return o;
  }
  o += "\nrank  TP  CP  PP   DP  EP ETP  v  mb recompute SP  dist  mem GiB  step (s)  tokens/s  "
       "TFLOP/s  MFU   bubble  TP exp  CP exp  EP exp  DP exp\n";
  for (size_t i = 0; i < r.best.size(); ++i) {
    const Candidate& c = r.best[i];
    const StepTime& t = c.time;
    o += fmt("%4zu %s %8.2f %9.3f %9.4g %8.1f %4.1f%% %6.1f%% %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n",
             i + 1, layout_short(c.layout).c_str(), c.memory.peak() / kGiB, t.step,
             t.tokens_per_second, t.model_tflops_per_device, 100 * t.mfu, 100 * t.bubble / t.step,
             100 * t.tp_exposed * t.micro_batches / t.step,
             100 * t.cp_exposed * t.micro_batches / t.step,
             100 * t.ep_comm * t.micro_batches / t.step, 100 * t.dp_exposed / t.step);
  }
  o += "\n(TFLOP/s: model FLOPs per device; bubble, TP, CP, EP and DP exp(osed) as shares "
       "of the step)\n";
  return o;
}

json search_to_json(const ModelSpec& model, const Machine& machine, Implementation impl,
                    int devices, const SearchResult& r) {
  json best = json::array();
  for (const Candidate& c : r.best)
    best.push_back({{"layout", layout_json(c.layout)},
                    {"peak_bytes", c.memory.peak()},
                    {"time", time_json(c.time)}});
  return {{"model", family_name(model.family)},
          {"machine", machine.name},
          {"implementation", implementation_name(impl)},
          {"devices", devices},
          {"evaluated", r.evaluated},
          {"fitting", r.fitting},
          {"best", best},
          {"smallest",
           {{"layout", layout_json(r.smallest.layout)}, {"peak_bytes", r.smallest.memory.peak()}}}};
}

}  // namespace megatron::plan
