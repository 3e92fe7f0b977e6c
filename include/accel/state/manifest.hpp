// A checkpoint's manifest.json as one type: save_state fills a Manifest and writes it last;
// load_state and `accel-launch checkpoint` read it first, through Manifest::read only, which
// refuses a missing, unreadable, foreign, newer or corrupt manifest before anything else is
// looked at. The JSON layout (docs/concepts/checkpoints.md) is written and read in manifest.ipp alone.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/separate_compilation.hpp"

namespace accel::state {

// 2: the manifest carries its own checksum (manifest_xxh3). 3: tensor-parallel checkpoints, with
// the mesh in the manifest and blocks of rows among the slices (slice_catalog.hpp); the others
// are still written as version 2. Versions 1 and 2 still load.
inline constexpr int checkpoint_format_version = 3;
inline constexpr int checkpoint_format_version_without_blocks = 2;

// The names of a checkpoint's files and of the tensors in them. Parameters and optimizer state
// are stored as slices, "<name>@<first element>" (slice_catalog.hpp); the rest whole.
inline std::string rank_file_name(int rank) { return fmt::format("rank_{}.safetensors", rank); }
inline std::string model_tensor_name(std::size_t model, const std::string& name) {
  return fmt::format("model{}/{}", model, name);
}
inline std::string state_tensor_name(std::size_t optimizer, std::size_t group, std::size_t index,
                                     const std::string& field) {
  return fmt::format("optimizer{}/{}/{}/{}", optimizer, group, index, field);
}
// An optimizer accel does not know field by field: its libtorch archive, from rank 0.
inline std::string optimizer_archive_name(std::size_t optimizer) {
  return fmt::format("optimizer{}/archive", optimizer);
}
inline std::string rng_tensor_name(int rank, std::size_t generator) {
  return generator == 0 ? fmt::format("rng/rank{}/cpu", rank)
                        : fmt::format("rng/rank{}/cuda{}", rank, generator - 1);
}
// Mid-window only: what a rank had collected, under its model tensor name or "flat<f>".
inline std::string gradient_tensor_name(int rank, const std::string& name) {
  return fmt::format("gradients/rank{}/{}", rank, name);
}
inline std::string custom_object_name(std::size_t index) {
  return fmt::format("custom/{}", index);
}

// A model's parameter or buffer as a whole (a sharded parameter's full shape).
struct TensorRecord {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;  // c10::toString's spelling: "Float", "BFloat16"
  // The dimension tensor parallelism split it along, over the mesh's tensor-parallel ranks
  // (part i on rank i of each group); -1: not split.
  int tensor_parallel_dim = -1;
};

struct ModelRecord {
  std::vector<TensorRecord> parameters;
  std::vector<TensorRecord> buffers;
};

struct ParamGroupRecord {
  std::size_t parameters = 0;
  nlohmann::json options;  // the optimizer kind's options (state/optimizer_state.hpp)
};

struct OptimizerRecord {
  std::string type;  // "torch::optim::AdamW", or "other" (a libtorch archive)
  std::vector<ParamGroupRecord> groups;
};

// Where a loader stood: the epoch to resume in and the batches of it already served.
struct LoaderRecord {
  std::int64_t epoch = 0;
  std::int64_t batches_consumed = 0;
  std::int64_t global_batches_consumed = 0;  // over all processes
  std::int64_t samples = 0;
  std::int64_t batch_size = 0;
  bool shuffle = false;
  std::uint64_t seed = 0;
};

// The accumulation window at the save: mid-window (collecting) the rank files hold gradients.
struct WindowRecord {
  int length = 1;
  int position = 0;
  bool collecting = false;
};

// A rank file: its size and XXH3-64, checked before it is used.
struct FileRecord {
  std::string name;
  std::uint64_t bytes = 0;
  std::string xxh3;
};

// nlohmann's converters of the records (manifest.ipp), found by argument-dependent lookup.
#define ACCEL_MANIFEST_RECORD(Record)                                  \
  ACCEL_DECL void to_json(nlohmann::json& j, const Record& record);   \
  ACCEL_DECL void from_json(const nlohmann::json& j, Record& record);
ACCEL_MANIFEST_RECORD(TensorRecord)
ACCEL_MANIFEST_RECORD(ModelRecord)
ACCEL_MANIFEST_RECORD(ParamGroupRecord)
ACCEL_MANIFEST_RECORD(OptimizerRecord)
ACCEL_MANIFEST_RECORD(LoaderRecord)
ACCEL_MANIFEST_RECORD(FileRecord)
#undef ACCEL_MANIFEST_RECORD

// The most processes a manifest may say it was saved by: far above any run, and low enough that
// a reader may keep a little per rank.
inline constexpr int max_world_size = 1 << 20;

namespace detail {

// Why a manifest's shape can be no tensor's ("whose dimension -1 is negative", "whose element
// count overflows 64 bits"), or nothing.
ACCEL_DECL std::optional<std::string> shape_problem(const std::vector<std::int64_t>& shape);

}  // namespace detail

struct Manifest {
  int format_version = checkpoint_format_version;
  std::string accel_version;
  std::string libtorch_version;
  int world_size = 1;
  // The mesh it was saved on: world_size / tensor_parallel data-parallel ranks, each a group of
  // tensor_parallel ranks (1 without tensor parallelism, and in a manifest without "mesh").
  int tensor_parallel = 1;
  std::string parallelism;  // the policies' full names
  std::string precision;
  int accumulation_steps = 1;
  bool split_batches = false;
  std::int64_t completed_steps = 0;
  std::vector<ModelRecord> models{};
  std::vector<OptimizerRecord> optimizers{};
  std::vector<unsigned> scheduler_steps{};  // each LR scheduler's step count
  std::vector<LoaderRecord> loaders{};
  WindowRecord window{};
  nlohmann::json precision_state = nlohmann::json::object();  // the precision's to_json
  std::size_t custom_objects = 0;
  std::vector<FileRecord> files{};
  // The run that saved it (folder_lock.hpp's this_run_id) and the run whose checkpoint that run
  // had loaded ("" for none); both "" in a manifest written before accel recorded them.
  std::string run_id{};
  std::string resumed_from{};

  // The file's text, with the manifest's own checksum.
  ACCEL_DECL std::string text() const;

  // `folder`'s manifest, checked: present, JSON, format accel-checkpoint of a version this accel
  // reads, its checksum right (version >= 2), every field there, and nothing a reader would
  // size memory by out of bounds: every dimension 0 or more, every element count within 64
  // bits, world_size from 1 to max_world_size. Errors begin with `call` ("load_state",
  // "checkpoint verify") and name the file.
  ACCEL_DECL static Manifest read(const std::filesystem::path& folder, std::string_view call);
};

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/manifest.ipp"
#endif
