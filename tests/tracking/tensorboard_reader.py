#!/usr/bin/env python3
"""Reads a TensorBoard event file that accel wrote and checks it against the run's own files.

    tensorboard_reader.py EVENTS METRICS_JSONL CONFIG_JSON [--cut]

Independent of accel's C++ encoder: the Event, Summary and TensorProto message classes are built
here from a descriptor holding the field numbers as tensorflow publishes them
(tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto, tensor_shape.proto,
types.proto), and decoded by the protobuf library (Debian's python3-protobuf); the TFRecord
framing and its CRC-32C are read and checked here, record by record, as TensorBoard does.

Checked: every record's two CRCs; the first event's file_version; the config as a text event at
step 0 holding config.json's text; then one event per line of metrics.jsonl, in order, with its
step, its time (wall_time less the first event's), and its values under their names in order:
each number as the float32 TensorBoard keeps (null, accel's NaN or infinity, as a NaN or an
infinity), each text as a rank-0 DT_STRING tensor with the text plugin's metadata.
With --cut the file's last record was cut short (a crash mid-write): the reader must find that
partial record, ignore it as TensorBoard does, and read every record before it (metrics.jsonl's
last line is then the one missing).
Exit status: 0 when everything matches, 1 with a message naming the first difference.
"""

import json
import math
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


class Mismatch(Exception):
    pass


# --- The messages, from their published field numbers. -------------------------------------------
F = descriptor_pb2.FieldDescriptorProto
PACKAGE = "accel_check"


def build_messages():
    proto = descriptor_pb2.FileDescriptorProto(name="accel_check/event.proto", package=PACKAGE,
                                               syntax="proto3")
    data_type = proto.enum_type.add(name="DataType")
    for name, number in (("DT_INVALID", 0), ("DT_FLOAT", 1), ("DT_STRING", 7)):
        data_type.value.add(name=name, number=number)

    def message(name, fields, oneofs=()):
        m = proto.message_type.add(name=name)
        for oneof in oneofs:
            m.oneof_decl.add(name=oneof)
        for field_name, number, kind, extra in fields:
            f = m.field.add(name=field_name, number=number, type=kind,
                            label=F.LABEL_REPEATED if extra.get("repeated") else F.LABEL_OPTIONAL)
            if "type" in extra:
                f.type_name = "." + PACKAGE + "." + extra["type"]
            if "oneof" in extra:
                f.oneof_index = oneofs.index(extra["oneof"])

    # event.proto
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, {}),
                      ("step", 2, F.TYPE_INT64, {}),
                      ("file_version", 3, F.TYPE_STRING, {"oneof": "what"}),
                      ("summary", 5, F.TYPE_MESSAGE, {"oneof": "what", "type": "Summary"})],
            oneofs=("what",))
    # summary.proto (Summary.Value and SummaryMetadata.PluginData, nested there, are top-level
    # here: the wire format does not name a message)
    message("Summary", [("value", 1, F.TYPE_MESSAGE, {"repeated": True, "type": "Value"})])
    message("Value", [("tag", 1, F.TYPE_STRING, {}),
                      ("simple_value", 2, F.TYPE_FLOAT, {"oneof": "value"}),
                      ("tensor", 8, F.TYPE_MESSAGE, {"oneof": "value", "type": "TensorProto"}),
                      ("metadata", 9, F.TYPE_MESSAGE, {"type": "SummaryMetadata"})],
            oneofs=("value",))
    message("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, {"type": "PluginData"})])
    message("PluginData", [("plugin_name", 1, F.TYPE_STRING, {}),
                           ("content", 2, F.TYPE_BYTES, {})])
    # tensor.proto, tensor_shape.proto (TensorShapeProto.Dim, nested there), types.proto
    message("TensorProto", [("dtype", 1, F.TYPE_ENUM, {"type": "DataType"}),
                            ("tensor_shape", 2, F.TYPE_MESSAGE, {"type": "TensorShapeProto"}),
                            ("string_val", 8, F.TYPE_BYTES, {"repeated": True})])
    message("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, {"repeated": True, "type": "Dim"})])
    message("Dim", [("size", 1, F.TYPE_INT64, {}), ("name", 2, F.TYPE_STRING, {})])

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(proto.SerializeToString())
    event = pool.FindMessageTypeByName(PACKAGE + ".Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf 4.22 and later
        return message_factory.GetMessageClass(event)
    return message_factory.MessageFactory(pool).GetPrototype(event)


# --- TFRecord framing and CRC-32C. ----------------------------------------------------------------
def crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


TABLE = crc32c_table()


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ byte) & 0xFF]
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(data):
    """The whole records' data, and the offset of a partial last record (None when none)."""
    records, offset = [], 0
    while offset < len(data):
        header = data[offset:offset + 12]
        if len(header) < 12:
            return records, offset
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:])
        if masked_crc32c(header[:8]) != length_crc:
            raise Mismatch(f"record {len(records)} at byte {offset}: the CRC of its length does "
                           f"not match (a damaged file)")
        body = data[offset + 12:offset + 12 + length + 4]
        if len(body) < length + 4:
            return records, offset
        (data_crc,) = struct.unpack("<I", body[length:])
        if masked_crc32c(body[:length]) != data_crc:
            raise Mismatch(f"record {len(records)} at byte {offset}: the CRC of its data does not "
                           f"match (a damaged file)")
        records.append(body[:length])
        offset += 12 + length + 4
    return records, None


# --- The checks. --------------------------------------------------------------------------------
def expect(condition, what):
    if not condition:
        raise Mismatch(what)


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_text(value, text, where):
    expect(value.WhichOneof("value") == "tensor", f"{where}: not a tensor value")
    expect(value.metadata.plugin_data.plugin_name == "text",
           f"{where}: plugin_name {value.metadata.plugin_data.plugin_name!r}, not 'text'")
    tensor = value.tensor
    expect(tensor.dtype == 7, f"{where}: dtype {tensor.dtype}, not DT_STRING (7)")
    expect(tensor.HasField("tensor_shape") and len(tensor.tensor_shape.dim) == 0,
           f"{where}: not a rank-0 tensor")
    expect(list(tensor.string_val) == [text.encode("utf-8")],
           f"{where}: {list(tensor.string_val)!r}, expected {text!r}")


def check(events_path, jsonl_path, config_path, cut):
    Event = build_messages()
    with open(events_path, "rb") as f:
        records, partial = read_records(f.read())
    if cut:
        expect(partial is not None, "the file ends with a whole record; expected a cut one")
    else:
        expect(partial is None, f"a partial record at byte {partial}")
    events = []
    for i, data in enumerate(records):
        event = Event()
        event.ParseFromString(data)
        events.append(event)
    with open(config_path, encoding="utf-8") as f:
        config_text = f.read()
    with open(jsonl_path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    if cut:
        lines = lines[:-1]

    expect(len(events) >= 1 and events[0].WhichOneof("what") == "file_version" and
           events[0].file_version == "brain.Event:2", "the first event is not file_version "
           "brain.Event:2")
    start = events[0].wall_time
    rest = events[1:]
    if config_text != "{}\n":
        expect(len(rest) >= 1, "no config event")
        config = rest.pop(0)
        expect(config.step == 0 and len(config.summary.value) == 1 and
               config.summary.value[0].tag == "config", "the second event is not the config")
        check_text(config.summary.value[0], config_text, "config")
    expect(len(rest) == len(lines),
           f"{len(rest)} events after the first, but metrics.jsonl has {len(lines)} lines")

    scalars = texts = 0
    for n, (event, line) in enumerate(zip(rest, lines), start=1):
        where = f"line {n} of metrics.jsonl (step {line['step']})"
        expect(event.step == line["step"], f"{where}: the event's step is {event.step}")
        expect(abs(event.wall_time - start - line["time"]) < 1e-5,
               f"{where}: wall_time - start = {event.wall_time - start}, time {line['time']}")
        expect(event.WhichOneof("what") == "summary", f"{where}: no summary")
        names = [k for k in line if k not in ("step", "time")]
        values = event.summary.value
        expect([v.tag for v in values] == names,
               f"{where}: tags {[v.tag for v in values]}, expected {names}")
        for value, name in zip(values, names):
            expected = line[name]
            at = f"{where}, '{name}'"
            if isinstance(expected, str):
                check_text(value, expected, at)
                texts += 1
                continue
            expect(value.WhichOneof("value") == "simple_value", f"{at}: not a simple_value")
            got = value.simple_value
            if expected is None:
                expect(math.isnan(got) or math.isinf(got), f"{at}: {got}, expected NaN or inf")
            else:
                expect(got == float32(float(expected)),
                       f"{at}: {got!r}, expected float32({expected!r}) = "
                       f"{float32(float(expected))!r}")
            scalars += 1
    print(f"tensorboard_reader: {len(records)} records ({'a cut one ignored' if cut else 'none cut'}),"
          f" {scalars} scalars and {texts} texts as metrics.jsonl holds them")


def main(argv):
    args = [a for a in argv[1:] if a != "--cut"]
    if len(args) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        check(*args, cut="--cut" in argv)
    except Mismatch as error:
        print(f"tensorboard_reader: {args[0]}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
