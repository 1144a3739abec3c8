// Checks and cleaning around the checkpoint directories, before the first iteration and after
// each save (docs/reliability.md):
//
//   - what --load resolves to, refusing what would silently start from random weights when a
//     checkpoint was meant (--finetune), or overwrite a checkpoint whose tracker is missing;
//   - that --save is writable by every rank that writes, before any compute is spent;
//   - that --save holds no complete checkpoint of another run (one this run did not load);
//   - removing the SAVE/iter_*.tmp-* directories that killed saves left behind;
//   - --save-retain-interval: removing the previous checkpoint once a newer one is committed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatron {

// Iterations of the complete checkpoints in `dir` — iter_XXXXXXX directories whose mp_rank_*
// directories form a complete grid, each with model.safetensors and state.json — ascending.
// In-progress and killed saves (iter_*.tmp-*) are not checkpoints. Empty when `dir` does
// not exist.
std::vector<int64_t> complete_checkpoint_iterations(const std::string& dir);

struct LoadPlan {
  std::optional<int64_t> iteration;  // the tracker's iteration; none: start from scratch
  std::string warning;               // why nothing is loaded, when nothing is
};

// What `--load load_dir` means for a training run:
//   - the tracker names an iteration: load it;
//   - no tracker but complete iter_* directories: Error naming the newest one and how to
//     resume from it (never start from scratch beside them: the saves would overwrite them);
//   - nothing loadable (no directory, an empty one): Error with `finetune` (it needs weights);
//     else a warning, and the run starts from scratch (the first launch of a job that
//     resumes from its own --save).
LoadPlan plan_load(const std::string& load_dir, bool finetune);

// Creates `save_dir` and writes, fsyncs and removes a probe file in it; throws Error naming
// --save and the reason when it cannot (read-only filesystem, a path under a file, no
// permission, no space). `rank` makes the probe's name unique.
void check_save_dir_writable(const std::string& save_dir, int rank);

// Throws Error when `save_dir` holds complete checkpoints and this run did not load from it
// (`loaded_from` is the --load directory a checkpoint was loaded from, "" for none): its
// saves would replace another run's checkpoints and tracker.
void check_save_dir_not_foreign(const std::string& save_dir, const std::string& loaded_from);

struct RemovedTemporaries {
  int64_t count = 0;
  uint64_t bytes = 0;
};
// Removes every SAVE/iter_*.tmp-* entry (the temporary directories of saves that were killed
// or failed; a successful save has renamed its own away). Best effort: what cannot be
// removed stays. Call only when no other save into `save_dir` is in progress.
RemovedTemporaries remove_stale_checkpoint_temporaries(const std::string& save_dir);

// --save-retain-interval N, after the save of `saved` committed (the tracker names it):
// removes SAVE/iter_<previous> when `previous` (the iteration the tracker named before this
// save) is older than `saved` and not a multiple of N, as Megatron does — so the newest
// checkpoint and every N-th one stay. A symbolic link is left alone. The directory is renamed
// to a temporary name first (SAVE/iter_<previous>.tmp-retired), so that a crash midway leaves
// a temporary the next save clears, never a partial checkpoint under its own name. Returns
// whether it removed one; best effort (a failure leaves the checkpoint).
bool retire_previous_checkpoint(const std::string& save_dir, std::optional<int64_t> previous,
                                int64_t saved, int64_t retain_interval);

}  // namespace megatron
