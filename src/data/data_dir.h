// The directory scripts/fetch_data.sh fills: $MEGATRON_DATA_DIR, else
// $HOME/.cache/megatron-cpp. Tests and benchmarks look there for the GPT-2/BERT vocabularies
// and the State of the Union corpus.
#pragma once

#include <string>

namespace megatron {

std::string data_dir();

// data_dir()/name; throws Error pointing at scripts/fetch_data.sh when it does not exist.
std::string fetched_data_file(const std::string& name);

}  // namespace megatron
