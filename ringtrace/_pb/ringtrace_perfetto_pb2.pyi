from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trace(_message.Message):
    __slots__ = ("packet",)
    PACKET_FIELD_NUMBER: _ClassVar[int]
    packet: _containers.RepeatedCompositeFieldContainer[TracePacket]
    def __init__(self, packet: _Optional[_Iterable[_Union[TracePacket, _Mapping]]] = ...) -> None: ...

class TracePacket(_message.Message):
    __slots__ = ("timestamp", "trusted_packet_sequence_id", "track_event", "track_descriptor", "compressed_packets", "interned_data", "sequence_flags", "trace_packet_defaults")
    class SequenceFlags(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SEQ_UNSPECIFIED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_INCREMENTAL_STATE_CLEARED: _ClassVar[TracePacket.SequenceFlags]
        SEQ_NEEDS_INCREMENTAL_STATE: _ClassVar[TracePacket.SequenceFlags]
    SEQ_UNSPECIFIED: TracePacket.SequenceFlags
    SEQ_INCREMENTAL_STATE_CLEARED: TracePacket.SequenceFlags
    SEQ_NEEDS_INCREMENTAL_STATE: TracePacket.SequenceFlags
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_FIELD_NUMBER: _ClassVar[int]
    TRACK_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_PACKETS_FIELD_NUMBER: _ClassVar[int]
    INTERNED_DATA_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    TRACE_PACKET_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    trusted_packet_sequence_id: int
    track_event: TrackEvent
    track_descriptor: TrackDescriptor
    compressed_packets: bytes
    interned_data: InternedData
    sequence_flags: int
    trace_packet_defaults: TracePacketDefaults
    def __init__(self, timestamp: _Optional[int] = ..., trusted_packet_sequence_id: _Optional[int] = ..., track_event: _Optional[_Union[TrackEvent, _Mapping]] = ..., track_descriptor: _Optional[_Union[TrackDescriptor, _Mapping]] = ..., compressed_packets: _Optional[bytes] = ..., interned_data: _Optional[_Union[InternedData, _Mapping]] = ..., sequence_flags: _Optional[int] = ..., trace_packet_defaults: _Optional[_Union[TracePacketDefaults, _Mapping]] = ...) -> None: ...

class TracePacketDefaults(_message.Message):
    __slots__ = ("track_event_defaults",)
    TRACK_EVENT_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    track_event_defaults: TrackEventDefaults
    def __init__(self, track_event_defaults: _Optional[_Union[TrackEventDefaults, _Mapping]] = ...) -> None: ...

class TrackEventDefaults(_message.Message):
    __slots__ = ("track_uuid", "extra_counter_track_uuids")
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    track_uuid: int
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, track_uuid: _Optional[int] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ...) -> None: ...

class InternedData(_message.Message):
    __slots__ = ("event_names", "debug_annotation_names")
    EVENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATION_NAMES_FIELD_NUMBER: _ClassVar[int]
    event_names: _containers.RepeatedCompositeFieldContainer[EventName]
    debug_annotation_names: _containers.RepeatedCompositeFieldContainer[DebugAnnotationName]
    def __init__(self, event_names: _Optional[_Iterable[_Union[EventName, _Mapping]]] = ..., debug_annotation_names: _Optional[_Iterable[_Union[DebugAnnotationName, _Mapping]]] = ...) -> None: ...

class EventName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class DebugAnnotationName(_message.Message):
    __slots__ = ("iid", "name")
    IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    iid: int
    name: str
    def __init__(self, iid: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class DebugAnnotation(_message.Message):
    __slots__ = ("name_iid", "name", "bool_value", "uint_value", "int_value", "double_value", "string_value")
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    name_iid: int
    name: str
    bool_value: bool
    uint_value: int
    int_value: int
    double_value: float
    string_value: str
    def __init__(self, name_iid: _Optional[int] = ..., name: _Optional[str] = ..., bool_value: _Optional[bool] = ..., uint_value: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("type", "track_uuid", "name_iid", "name", "debug_annotations", "counter_value", "double_counter_value", "extra_counter_track_uuids", "extra_counter_values")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_BEGIN: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_END: _ClassVar[TrackEvent.Type]
        TYPE_INSTANT: _ClassVar[TrackEvent.Type]
        TYPE_COUNTER: _ClassVar[TrackEvent.Type]
    TYPE_UNSPECIFIED: TrackEvent.Type
    TYPE_SLICE_BEGIN: TrackEvent.Type
    TYPE_SLICE_END: TrackEvent.Type
    TYPE_INSTANT: TrackEvent.Type
    TYPE_COUNTER: TrackEvent.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_IID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_COUNTER_VALUE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_TRACK_UUIDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNTER_VALUES_FIELD_NUMBER: _ClassVar[int]
    type: TrackEvent.Type
    track_uuid: int
    name_iid: int
    name: str
    debug_annotations: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    counter_value: int
    double_counter_value: float
    extra_counter_track_uuids: _containers.RepeatedScalarFieldContainer[int]
    extra_counter_values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[_Union[TrackEvent.Type, str]] = ..., track_uuid: _Optional[int] = ..., name_iid: _Optional[int] = ..., name: _Optional[str] = ..., debug_annotations: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., counter_value: _Optional[int] = ..., double_counter_value: _Optional[float] = ..., extra_counter_track_uuids: _Optional[_Iterable[int]] = ..., extra_counter_values: _Optional[_Iterable[int]] = ...) -> None: ...

class TrackDescriptor(_message.Message):
    __slots__ = ("uuid", "parent_uuid", "name", "description", "process", "counter", "child_ordering", "sibling_order_rank")
    class ChildTracksOrdering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        LEXICOGRAPHIC: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        CHRONOLOGICAL: _ClassVar[TrackDescriptor.ChildTracksOrdering]
        EXPLICIT: _ClassVar[TrackDescriptor.ChildTracksOrdering]
    UNKNOWN: TrackDescriptor.ChildTracksOrdering
    LEXICOGRAPHIC: TrackDescriptor.ChildTracksOrdering
    CHRONOLOGICAL: TrackDescriptor.ChildTracksOrdering
    EXPLICIT: TrackDescriptor.ChildTracksOrdering
    UUID_FIELD_NUMBER: _ClassVar[int]
    PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    CHILD_ORDERING_FIELD_NUMBER: _ClassVar[int]
    SIBLING_ORDER_RANK_FIELD_NUMBER: _ClassVar[int]
    uuid: int
    parent_uuid: int
    name: str
    description: str
    process: ProcessDescriptor
    counter: CounterDescriptor
    child_ordering: TrackDescriptor.ChildTracksOrdering
    sibling_order_rank: int
    def __init__(self, uuid: _Optional[int] = ..., parent_uuid: _Optional[int] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., process: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., counter: _Optional[_Union[CounterDescriptor, _Mapping]] = ..., child_ordering: _Optional[_Union[TrackDescriptor.ChildTracksOrdering, str]] = ..., sibling_order_rank: _Optional[int] = ...) -> None: ...

class ProcessDescriptor(_message.Message):
    __slots__ = ("pid", "process_name", "process_labels")
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESS_LABELS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    process_name: str
    process_labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pid: _Optional[int] = ..., process_name: _Optional[str] = ..., process_labels: _Optional[_Iterable[str]] = ...) -> None: ...

class CounterDescriptor(_message.Message):
    __slots__ = ("unit", "unit_name")
    class Unit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNIT_UNSPECIFIED: _ClassVar[CounterDescriptor.Unit]
        UNIT_TIME_NS: _ClassVar[CounterDescriptor.Unit]
        UNIT_COUNT: _ClassVar[CounterDescriptor.Unit]
        UNIT_SIZE_BYTES: _ClassVar[CounterDescriptor.Unit]
    UNIT_UNSPECIFIED: CounterDescriptor.Unit
    UNIT_TIME_NS: CounterDescriptor.Unit
    UNIT_COUNT: CounterDescriptor.Unit
    UNIT_SIZE_BYTES: CounterDescriptor.Unit
    UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_NAME_FIELD_NUMBER: _ClassVar[int]
    unit: CounterDescriptor.Unit
    unit_name: str
    def __init__(self, unit: _Optional[_Union[CounterDescriptor.Unit, str]] = ..., unit_name: _Optional[str] = ...) -> None: ...
