// TensorBoard's event file format: a sequence of TFRecords, each holding one Event protocol
// buffer. The first Event names the format (file_version "brain.Event:2"); each later one holds
// a step's Summary: a float per scalar (Value.simple_value, which TensorBoard's scalars
// dashboard reads), or a string tensor per text with the text plugin's metadata, as
// tensorboard's own text summary writes it.
//
// A TFRecord is the data's length (uint64, little-endian), the masked CRC-32C of those 8 bytes,
// the data, and the masked CRC-32C of the data (crc32c.hpp): a reader stops at a record cut short
// (a crash mid-write), reading every record before it, and refuses one whose CRC does not match.
// The messages are encoded by hand (protobuf_wire.hpp, which says why), with the field numbers of
// tensorflow/core/util/event.proto, framework/summary.proto and framework/tensor.proto.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../detail/separate_compilation.hpp"
#include "values.hpp"

namespace accel::tracking::event_file {

/// What the first Event's file_version says: the format TensorBoard reads.
inline constexpr std::string_view file_version = "brain.Event:2";

/// `data` framed as one TFRecord.
ACCEL_DECL std::string record(std::string_view data);

/// The first Event of a file: its version, at `wall_time` (seconds since the Unix epoch).
ACCEL_DECL std::string version_event(double wall_time);

/// One Event with a Summary holding one float Value per scalar, tagged with its name.
ACCEL_DECL std::string scalars_event(const Scalars& values, std::int64_t step, double wall_time);

/// One Event with a Summary holding one text Value per (name, text): a string tensor of rank 0
/// with the metadata plugin_name "text", which TensorBoard's Text dashboard shows.
ACCEL_DECL std::string texts_event(const Texts& values, std::int64_t step, double wall_time);

}  // namespace accel::tracking::event_file

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/event_file.ipp"
#endif
