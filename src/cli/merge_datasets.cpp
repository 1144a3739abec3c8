// `megatron merge-datasets` — Megatron-LM's tools/merge_datasets.py: concatenates every
// indexed dataset (PREFIX.bin + PREFIX.idx) of a directory, in sorted order of the prefixes,
// into one dataset with the first one's dtype.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/args/arg_table.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/indexed_dataset_builder.h"

namespace megatron::cli {

namespace fs = std::filesystem;

int run_merge_datasets(int argc, char** argv) {
  CLI::App app{"Concatenate the indexed datasets (.bin/.idx) of a directory into one",
               "megatron merge-datasets"};
  std::string input, output_prefix;
  bool multimodal = false;
  app.add_option("--input", input, "directory holding the PREFIX.bin/PREFIX.idx pairs to merge")
      ->required();
  app.add_option("--output-prefix", output_prefix, "writes OUTPUT_PREFIX.bin/.idx")->required();
  app.add_flag("--multimodal", multimodal, "multimodal datasets (not supported: rejected)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  MT_REQUIRE(!multimodal, "--multimodal: multimodal datasets are not supported");
  MT_REQUIRE(fs::is_directory(input), "--input '", input,
             "' is not a directory; expected the directory of the datasets to merge");
  const fs::path out_dir = fs::path(output_prefix).parent_path();
  MT_REQUIRE(out_dir.empty() || fs::is_directory(out_dir), "the directory of --output-prefix '",
             output_prefix, "' does not exist");
  // As merge_datasets.py: every regular file's stem is a prefix, which needs both files.
  std::set<std::string> prefixes;
  for (const fs::directory_entry& e : fs::directory_iterator(input)) {
    if (!e.is_regular_file()) continue;
    const fs::path stem = e.path().parent_path() / e.path().stem();
    const std::string other = e.path().extension() == ".idx" ? ".bin" : ".idx";
    MT_REQUIRE(fs::is_regular_file(stem.string() + other), "'", e.path().string(), "' has no ",
               other, " file beside it: --input must hold only .bin/.idx pairs");
    prefixes.insert(stem.string());
  }
  MT_REQUIRE(!prefixes.empty(), "--input '", input, "' holds no dataset (.bin/.idx pair)");

  std::unique_ptr<IndexedDatasetBuilder> builder;
  for (const std::string& prefix : prefixes) {
    IndexedDataset dataset(prefix);
    if (!builder) builder = std::make_unique<IndexedDatasetBuilder>(output_prefix, dataset.dtype());
    builder->add_index(dataset);
  }
  builder->finalize();
  std::printf("merged %zu datasets into %s.bin %s.idx\n", prefixes.size(), output_prefix.c_str(),
              output_prefix.c_str());
  return 0;
}

}  // namespace megatron::cli
