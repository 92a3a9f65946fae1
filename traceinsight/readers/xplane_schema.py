"""The XSpace protobuf schema, declared here from its field numbers.

TensorFlow ships the only `xplane_pb2`, and importing it imports all of
TensorFlow (seconds, 1.3 GB). The schema is seven small messages, so we build
them at run time in a private descriptor pool (no protoc, no TensorFlow, no
clash with TensorFlow's own registration of `tensorflow.profiler.XSpace`).
Field numbers follow tsl/profiler/protobuf/xplane.proto.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool

try:  # protobuf >= 4.22
    from google.protobuf.message_factory import GetMessageClass as get_message_class
except ImportError:  # pragma: no cover - older protobuf
    from google.protobuf.message_factory import MessageFactory

    def get_message_class(descriptor: Any) -> Any:
        return MessageFactory().GetPrototype(descriptor)


_PACKAGE = "traceinsight.xplane"
_F = descriptor_pb2.FieldDescriptorProto

# message -> [(field name, number, type, label, message type or None, oneof index or None)]
_MESSAGES: dict[str, list[tuple[str, int, int, int, str | None, int | None]]] = {
    "XSpace": [
        ("planes", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane", None),
        ("errors", 2, _F.TYPE_STRING, _F.LABEL_REPEATED, None, None),
        ("warnings", 3, _F.TYPE_STRING, _F.LABEL_REPEATED, None, None),
        ("hostnames", 4, _F.TYPE_STRING, _F.LABEL_REPEATED, None, None),
    ],
    "XPlane": [
        ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("lines", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XLine", None),
        ("event_metadata", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("display_id", 10, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("display_name", 11, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("timestamp_ns", 3, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("duration_ps", 9, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("events", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("offset_ps", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, 0),
        ("num_occurrences", 5, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, 0),
        ("duration_ps", 3, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("stats", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("double_value", 2, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None, 0),
        ("uint64_value", 3, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None, 0),
        ("int64_value", 4, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, 0),
        ("str_value", 5, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, 0),
        ("bytes_value", 6, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, None, 0),
        ("ref_value", 7, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None, 0),
    ],
    "XEventMetadata": [
        ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("display_name", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("metadata", 3, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, None, None),
        ("stats", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat", None),
        ("child_id", 6, _F.TYPE_INT64, _F.LABEL_REPEATED, None, None),
    ],
    "XStatMetadata": [
        ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
        ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("description", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
    ],
}
_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}
_MAP_ENTRIES = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


def _add_fields(message: descriptor_pb2.DescriptorProto, fields: list[Any]) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = message.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="traceinsight/xplane.proto", package=_PACKAGE, syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = fd.message_type.add(name=msg_name)
        for oneof in _ONEOFS.get(msg_name, []):
            msg.oneof_decl.add(name=oneof)
        _add_fields(msg, fields)
        if msg_name == "XPlane":
            for entry_name, value_type in _MAP_ENTRIES.items():
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                _add_fields(
                    entry,
                    [
                        ("key", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
                        ("value", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, value_type, None),
                    ],
                )
    return fd


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return pool


def message_class(name: str) -> Any:
    """The generated message class for one XSpace message (`"XSpace"`, `"XPlane"`, ...)."""
    return get_message_class(_pool().FindMessageTypeByName(f"{_PACKAGE}.{name}"))


def XSpace() -> Any:  # noqa: N802 - reads like the message it makes
    """A new, empty XSpace message."""
    return message_class("XSpace")()
