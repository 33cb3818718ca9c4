"""The hand-encoded protobuf (:mod:`ringtrace.sinks.perfetto._wire`, and :mod:`._file`'s framing):
the proto subset has Perfetto's own field numbers (checked against the official ``perfetto``
package's ``perfetto_trace_pb2``), the generated ``ringtrace._pb`` module is what
``scripts/gen-proto.sh`` makes, and the hand-written tags and varints match the descriptors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from ringtrace._pb import ringtrace_perfetto_pb2 as ours
from ringtrace.sinks._varint import LEN, VARINT, tag, varint
from ringtrace.sinks.perfetto import _file as trace_file
from ringtrace.sinks.perfetto import _wire as tw

ROOT = Path(__file__).resolve().parents[3]


def _check_message(mine: Any, theirs: Any) -> None:
    for f in mine.fields:
        o = theirs.fields_by_name.get(f.name)
        assert o is not None, f"{mine.name}.{f.name} is not in Perfetto's {theirs.full_name}"
        assert (f.number, f.type, f.is_repeated) == (o.number, o.type, o.is_repeated), f"{mine.name}.{f.name}"
        if f.message_type is not None:
            assert o.message_type is not None and f.message_type.name == o.message_type.name
            _check_message(f.message_type, o.message_type)
        if f.enum_type is not None:
            assert o.enum_type is not None
            _check_enum(f.enum_type, o.enum_type)


def _check_enum(mine: Any, theirs: Any) -> None:
    for v in mine.values:
        assert theirs.values_by_name[v.name].number == v.number, f"{mine.name}.{v.name}"


def test_proto_subset_has_perfettos_field_numbers() -> None:
    for name, msg in ours.DESCRIPTOR.message_types_by_name.items():
        _check_message(msg, official.DESCRIPTOR.message_types_by_name[name])


_GENCODE_VERSION = re.compile(rb"(Protobuf Python Version: |ValidateProtobufRuntimeVersion\(\s*\S+,\s*)[\d.,\s]+")


def _normalized(path: Path) -> bytes:
    """The file with protoc's version stamp blanked (a newer grpcio-tools may only bump it)."""
    return _GENCODE_VERSION.sub(rb"\1<version>", path.read_bytes())


def test_generated_module_matches_the_script(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "scripts" / "gen-proto.sh"), str(tmp_path)], check=True, cwd=ROOT, env=env)
    committed = ROOT / "ringtrace" / "_pb"
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != "__init__.py")
    assert names == ["ringtrace_perfetto_pb2.py", "ringtrace_perfetto_pb2.pyi"]
    for name in names:
        assert _normalized(committed / name) == _normalized(tmp_path / name), (
            f"ringtrace/_pb/{name} is stale: run scripts/gen-proto.sh and commit")
    assert (committed / "__init__.py").is_file()


def test_hand_encoded_tags_match_the_descriptors() -> None:
    P, E, A = ours.TracePacket, ours.TrackEvent, ours.DebugAnnotation
    expected: list[tuple[bytes, Any, str]] = [
        (trace_file.TRACE_PACKET, ours.Trace, "packet"),
        (tw.PKT_TIMESTAMP, P, "timestamp"), (tw.PKT_SEQUENCE_ID, P, "trusted_packet_sequence_id"),
        (tw.PKT_TRACK_EVENT, P, "track_event"), (trace_file.PKT_COMPRESSED, P, "compressed_packets"),
        (tw.EV_DEBUG_ANNOTATION, E, "debug_annotations"), (tw.EV_TYPE, E, "type"), (tw.EV_NAME_IID, E, "name_iid"),
        (tw.EV_TRACK_UUID, E, "track_uuid"), (tw.EV_EXTRA_VALUE, E, "extra_counter_values"), (tw.EV_NAME, E, "name"),
        (tw.EV_COUNTER_VALUE, E, "counter_value"), (tw.EV_EXTRA_UUID, E, "extra_counter_track_uuids"),
        (tw.ANN_NAME_IID, A, "name_iid"), (tw.ANN_BOOL, A, "bool_value"), (tw.ANN_INT, A, "int_value"),
    ]
    for const, msg, field in expected:
        f = msg.DESCRIPTOR.fields_by_name[field]
        wire = LEN if f.type in (f.TYPE_MESSAGE, f.TYPE_BYTES, f.TYPE_STRING) else VARINT
        assert tag(f.number, wire) == const, f"{msg.__name__}.{field}"
    T = ours.TrackEvent
    assert [T.TYPE_SLICE_BEGIN, T.TYPE_SLICE_END, T.TYPE_INSTANT, T.TYPE_COUNTER] == [
        tw.SLICE_BEGIN, tw.SLICE_END, tw.INSTANT, tw.COUNTER]


def test_varint() -> None:
    for n in [*range(0, 40000, 7), 2**21 - 1, 2**21, 2**28, 2**35 + 3, 2**63 - 1, 2**64 - 1]:
        msg = official.TrackEvent(track_uuid=n)
        assert tw.EV_TRACK_UUID + varint(n) == msg.SerializeToString()
    for n in (-1, -300, -(2**63)):
        msg = official.TrackEvent(counter_value=n)
        assert tw.EV_COUNTER_VALUE + varint(n) == msg.SerializeToString()
