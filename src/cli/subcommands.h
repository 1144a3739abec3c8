// The subcommands of the `megatron` binary, one file each in cli/. Each receives the
// arguments after the subcommand name and returns the process exit code; errors are thrown
// as megatron::Error and reported by main().
#pragma once

namespace megatron::cli {

int run_bench(int argc, char** argv);
int run_comm_check(int argc, char** argv);
int run_pretrain_gpt(int argc, char** argv);
int run_pretrain_bert(int argc, char** argv);
int run_preprocess(int argc, char** argv);
int run_merge_datasets(int argc, char** argv);
int run_convert(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_plan(int argc, char** argv);
int run_plot(int argc, char** argv);
int run_eval(int argc, char** argv);
int run_finetune(int argc, char** argv);
int run_launch(int argc, char** argv);

}  // namespace megatron::cli
