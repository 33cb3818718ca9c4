"""``ringtrace convert`` (the command users run; ``tests._support.convert`` runs it): one trace for many sources,
decoded with Perfetto's own protos."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ringtrace.sources.paths import find_sources
from tests._support.convert import convert
from tests._support.samples import SAMPLES


def decode(path: Path) -> pb.Trace:
    """The trace's packets, with Perfetto's ``compressed_packets`` (zlib-deflated Trace) unpacked."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    flat = pb.Trace()
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            part = pb.Trace()
            part.ParseFromString(zlib.decompress(p.compressed_packets))
            flat.packet.extend(part.packet)
        else:
            flat.packet.append(p)
    return flat


def test_convert_all_samples_into_one_trace(tmp_path: Path) -> None:
    out = tmp_path / "all.pftrace"
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "convert", str(SAMPLES), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "10 source(s)" in proc.stdout  # 8 files and the 2 failed runs known from their host.log alone
    trace = decode(out)
    processes = [p.track_descriptor for p in trace.packet
                 if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")]
    assert len(processes) == 10
    begins = sum(1 for p in trace.packet if p.HasField("track_event") and p.track_event.type == 1)  # SLICE_BEGIN
    # every paired scope and every wedged scope is a slice: 681+681+681 (nested), 251, 992, 2, plus 1 + 5 wedged,
    # plus the verdict track's slice of each of the 10 runs
    assert begins == 681 * 3 + 251 + 992 + 2 + 1 + 5 + 10


def test_convert_without_an_output_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "convert", str(SAMPLES)], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "nothing to write" in proc.stderr


def test_convert_to_an_unwritable_place_is_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "convert", str(SAMPLES), "-o",
                           str(tmp_path / "missing-dir" / "x.pftrace")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_convert_sends_spans_to_a_real_otlp_receiver(tmp_path: Path) -> None:
    from tests._support.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as rx:
        proc = subprocess.run([sys.executable, "-m", "ringtrace", "convert", str(SAMPLES / "outputs"),
                               "--otlp-endpoint", rx.grpc_endpoint, "--otlp-protocol", "grpc"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "spans exported in 4 trace(s)" in proc.stdout
        # 681 + 251 + 992 + 2 scopes, plus one root span per run
        assert rx.wait_for_spans(681 + 251 + 992 + 2 + 4)


def test_the_convert_function_reads_and_writes_or_says_why_not(tmp_path: Path) -> None:
    l3 = SAMPLES / "build_output" / "nested_l3_20261130_102011"
    out = tmp_path / "x.pftrace"
    assert convert(find_sources([str(l3)])[0], out) == []
    names = {p.track_descriptor.process.process_name for p in decode(out).packet
             if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")}
    assert names == {"rank0/d0 nested_l3", "rank1/d1 nested_l3"}  # what tells ranks apart comes first
    missing = convert([tmp_path / "missing.jsonl"], tmp_path / "y.pftrace")
    assert len(missing) == 1 and "missing.jsonl" in missing[0]
    unwritable = convert(find_sources([str(l3)])[0], tmp_path / "no" / "dir" / "z.pftrace")
    assert len(unwritable) == 1 and "z.pftrace: cannot write" in unwritable[0]
