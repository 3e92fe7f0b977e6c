// TensorBoard's event file format (event_file.hpp); event_file.hpp includes it in header-only
// mode, impl/src.hpp in the separately compiled one.
#include "../crc32c.hpp"
#include "../event_file.hpp"
#include "../protobuf_wire.hpp"

namespace accel::tracking::event_file {

namespace fields {
// tensorflow/core/util/event.proto, message Event.
inline constexpr int event_wall_time = 1;     // double
inline constexpr int event_step = 2;          // int64
inline constexpr int event_file_version = 3;  // string
inline constexpr int event_summary = 5;       // Summary
// tensorflow/core/framework/summary.proto, message Summary and Summary.Value.
inline constexpr int summary_value = 1;  // repeated Value
inline constexpr int value_tag = 1;           // string
inline constexpr int value_simple_value = 2;  // float
inline constexpr int value_tensor = 8;        // TensorProto
inline constexpr int value_metadata = 9;      // SummaryMetadata
// SummaryMetadata and SummaryMetadata.PluginData.
inline constexpr int metadata_plugin_data = 1;  // PluginData
inline constexpr int plugin_name = 1;           // string
// tensorflow/core/framework/tensor.proto, message TensorProto; types.proto, enum DataType.
inline constexpr int tensor_dtype = 1;       // DataType
inline constexpr int tensor_shape = 2;       // TensorShapeProto (no dim: rank 0)
inline constexpr int tensor_string_val = 8;  // repeated bytes
inline constexpr std::uint64_t dt_string = 7;
}  // namespace fields

namespace fields {
// An Event's wall time and step; its one `what` is added by the caller.
inline protobuf::MessageWriter event(double wall_time, std::int64_t step) {
  protobuf::MessageWriter writer;
  writer.fixed64(fields::event_wall_time, wall_time);
  if (step != 0) writer.varint(fields::event_step, static_cast<std::uint64_t>(step));
  return writer;
}
}  // namespace fields

ACCEL_DECL std::string record(std::string_view data) {
  std::string length(8, '\0');
  for (std::size_t i = 0; i < 8; ++i)
    length[i] = static_cast<char>(static_cast<std::uint64_t>(data.size()) >> (8 * i));
  auto crc_bytes = [](std::uint32_t crc) {
    std::string bytes(4, '\0');
    for (std::size_t i = 0; i < 4; ++i) bytes[i] = static_cast<char>(crc >> (8 * i));
    return bytes;
  };
  std::string framed = length + crc_bytes(masked_crc32c(length));
  framed.append(data);
  return framed + crc_bytes(masked_crc32c(data));
}

ACCEL_DECL std::string version_event(double wall_time) {
  protobuf::MessageWriter writer = fields::event(wall_time, 0);
  writer.bytes(fields::event_file_version, file_version);
  return std::move(writer).data();
}

ACCEL_DECL std::string scalars_event(const Scalars& values, std::int64_t step, double wall_time) {
  protobuf::MessageWriter summary;
  for (const auto& [name, number] : values) {
    protobuf::MessageWriter value;
    value.bytes(fields::value_tag, name);
    value.fixed32(fields::value_simple_value, static_cast<float>(number.value));
    summary.bytes(fields::summary_value, value.data());
  }
  protobuf::MessageWriter writer = fields::event(wall_time, step);
  writer.bytes(fields::event_summary, summary.data());
  return std::move(writer).data();
}

ACCEL_DECL std::string texts_event(const Texts& values, std::int64_t step, double wall_time) {
  protobuf::MessageWriter plugin;
  plugin.bytes(fields::plugin_name, "text");
  protobuf::MessageWriter metadata;
  metadata.bytes(fields::metadata_plugin_data, plugin.data());
  protobuf::MessageWriter summary;
  for (const auto& [name, text] : values) {
    protobuf::MessageWriter tensor;
    tensor.varint(fields::tensor_dtype, fields::dt_string);
    tensor.bytes(fields::tensor_shape, "");
    tensor.bytes(fields::tensor_string_val, text);
    protobuf::MessageWriter value;
    value.bytes(fields::value_tag, name);
    value.bytes(fields::value_metadata, metadata.data());
    value.bytes(fields::value_tensor, tensor.data());
    summary.bytes(fields::summary_value, value.data());
  }
  protobuf::MessageWriter writer = fields::event(wall_time, step);
  writer.bytes(fields::event_summary, summary.data());
  return std::move(writer).data();
}

}  // namespace accel::tracking::event_file
