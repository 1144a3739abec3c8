// Loading a pretrained model under a new head — finetuning's --pretrained-checkpoint (DESIGN.md
// §3 "Tasks"): the body comes from the checkpoint, the task head keeps its fresh
// initialisation, and the checkpoint's own heads (BERT's LM and sentence-order heads) stay
// unread. Megatron does the same by loading the language model's state dict and warning that
// the task head was not found; here both lists are explicit and logged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "parallel/parameter.h"

namespace megatron {

struct PretrainedLoadReport {
  std::string from;                 // the iteration directory read
  std::vector<std::string> fresh;   // model parameters left to their initialisation
  std::vector<std::string> unused;  // checkpoint parameters the model lacks
};

// Reads iteration `iteration` (-1: the tracker's) of `load_dir` into every parameter of
// `params` whose name starts with none of `fresh_prefixes` (resharded and re-padded as
// load_checkpoint does); the others keep their values. No optimizer state, no trainer state.
// Returns the fresh and unused parameters (for log_pretrained_load). Throws Error, before
// changing anything, listing every loaded parameter that the checkpoint lacks or holds in
// another shape, and when a fresh prefix matches no model parameter (a misspelt head name
// would otherwise load nothing fresh silently). Not collective.
PretrainedLoadReport load_pretrained(const std::string& load_dir, int64_t iteration,
                                     ParameterStore& params,
                                     const std::vector<std::string>& fresh_prefixes);

// The report of a model split into pipeline stages, from each stage's own (collective over
// `pipeline`, the stages in rank order): the fresh parameters of every stage, and the
// checkpoint parameters that no stage read. Identical on every member.
PretrainedLoadReport merge_stage_reports(const PretrainedLoadReport& stage, Communicator& pipeline);

// Logs (rank 0) where the weights came from, the fresh parameters and the unused ones.
void log_pretrained_load(const PretrainedLoadReport& report);

}  // namespace megatron
