"""Property-based fuzzing (Hypothesis) of the Python readers of files a run user, a radio or
an experiment author writes and root-run analysis reads (docs/fuzzing.md, "Python
readers"): pcap captures, SigMF metadata and recorder journals, the sweep section of an
experiment file, and the run folder's CSV/JSON traces. Each property: every input either
parses or raises the reader's documented error type (a ValueError subclass whose message
names the file or field), never anything else; what a reader accepts satisfies its own
checks. Deterministic (derandomize, bounded examples): the same inputs on every run."""

from __future__ import annotations

import json
import re
import struct
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")  # Debian python3-hypothesis (tools/bootstrap.sh)
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from oppsched.analysis import pcap, sigmf  # noqa: E402
from oppsched.config import ConfigError  # noqa: E402
from oppsched.experiments.testbed import readers, traces  # noqa: E402
from oppsched.run.runner import load_experiment  # noqa: E402

FUZZ = settings(derandomize=True, max_examples=30, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def scratch() -> Path:
    """A fresh folder per example (Hypothesis runs many examples in one test call)."""
    return Path(tempfile.mkdtemp(prefix="oppsched-fuzz-"))


# JSON values, with the awkward ones: NaN and infinities (Python's json reads them), huge
# and negative integers, nesting.
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(json_scalars,
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=12), inner,
                                                                   max_size=4)),
                           max_leaves=12)

# ---------------------------------------------------------------------------------------
# pcap (oppsched.analysis.pcap: read_tcp, iter_frames; traces: recover's cut, pcap_records)

LINKTYPES = [1, 12, 101, 113, 228, 229, 276, 0, 0x1000_0065]
LINK_PREFIX = {1: b"\0" * 12 + b"\x08\x00", 113: b"\0" * 14 + b"\x86\xdd",
               276: b"\x08\x00" + b"\0" * 18}


@st.composite
def ip_frames(draw, linktype: int) -> bytes:
    """A frame of the link type whose IP and TCP headers are mostly well formed, or noise."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=120))
    prefix = LINK_PREFIX.get(linktype, b"")
    if linktype == 1 and draw(st.booleans()):
        prefix = b"\0" * 12 + b"\x81\x00\0\0" + draw(st.sampled_from([b"\x08\x00", b"\x86\xdd"]))
    v6 = draw(st.booleans())
    if v6:
        ip = bytearray(draw(st.binary(min_size=40, max_size=40)))
        ip[0] = draw(st.sampled_from([0x60, 0x6f, 0x40, 0x00]))
        ip[6] = draw(st.sampled_from([6, 6, 17]))
    else:
        ip = bytearray(draw(st.binary(min_size=20, max_size=20)))
        ip[0] = draw(st.sampled_from([0x45, 0x46, 0x4f, 0x40, 0x41, 0x60]))
        ip[9] = draw(st.sampled_from([6, 6, 17]))
        if draw(st.booleans()):
            ip[6] = ip[7] = 0  # not a fragment
    tcp = bytearray(draw(st.binary(min_size=0, max_size=60)))
    if len(tcp) >= 14 and draw(st.booleans()):
        tcp[12] = draw(st.sampled_from([0x50, 0x60, 0xf0, 0x00, 0x80]))
        tcp[13] |= 0x02  # SYN: the options are read
    return prefix + bytes(ip) + bytes(tcp)


@st.composite
def pcap_files(draw) -> bytes:
    """A classic pcap (either byte order, micro or nanosecond stamps) whose records may lie
    about their length, or arbitrary bytes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=200))
    e = draw(st.sampled_from("<>"))
    magic = draw(st.sampled_from([0xA1B2C3D4, 0xA1B23C4D]))
    lt = draw(st.sampled_from(LINKTYPES))
    out = struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 128, lt)
    for _ in range(draw(st.integers(0, 6))):
        data = draw(ip_frames(lt))
        incl = len(data) if draw(st.integers(0, 5)) else draw(st.integers(0, 2**32 - 1))
        out += struct.pack(e + "IIII", draw(st.integers(0, 2**32 - 1)),
                           draw(st.integers(0, 2**32 - 1)), incl,
                           draw(st.integers(0, 2**32 - 1))) + data
    if draw(st.booleans()):
        out = out[:draw(st.integers(0, len(out)))]  # cut anywhere, as a crash cuts
    return out


@FUZZ
@given(pcap_files())
@example(b"")
@example(b"\xd4\xc3\xb2\xa1" + b"\0" * 20)
def test_pcap_reader_parses_any_file_or_raises_pcap_error(data):
    p = scratch() / "x.pcap"
    p.write_bytes(data)
    try:
        df = pcap.read_tcp(p)
    except pcap.PcapError as exc:
        assert str(p) in str(exc)
        return
    assert list(df.columns) == pcap.COLUMNS
    if len(df):
        assert (df["payload"] >= 0).all()
        assert df["sport"].between(0, 65535).all() and df["dport"].between(0, 65535).all()
        assert df["flags"].between(0, 0x1FF).all()


@FUZZ
@given(pcap_files())
def test_a_cut_pcap_is_cut_at_a_record_boundary_that_the_counter_and_reader_agree_on(data):
    whole = traces._whole_pcap_bytes(data)
    assert whole == 0 or traces.PCAP_HEADER <= whole <= len(data)
    d = scratch()
    (d / "c.pcap").write_bytes(data)
    n, cut = traces.pcap_records(d / "c.pcap")
    assert cut == (len(data) - whole if whole else len(data))
    (d / "c.pcap.partial").write_bytes(data)
    entry = traces.recover(d / "c.pcap.partial", d / "r.pcap")
    assert entry["bytes"] == whole and entry["cut_bytes"] == len(data) - whole
    assert (d / "r.pcap").read_bytes() == data[:whole]
    if whole:
        assert traces.pcap_records(d / "r.pcap") == (n, 0)
        try:
            frames = list(pcap.iter_frames(d / "r.pcap"))
        except pcap.PcapError:
            return  # the counter does not check the magic; the reader does
        assert len(frames) == n


@FUZZ
@given(st.binary(max_size=300))
def test_a_cut_csv_trace_keeps_its_whole_lines(data):
    d = scratch()
    (d / "t.csv.partial").write_bytes(data)
    entry = traces.recover(d / "t.csv.partial", d / "t.csv")
    kept = (d / "t.csv").read_bytes()
    assert kept == data[:entry["bytes"]] and (kept == b"" or kept.endswith(b"\n"))
    assert b"\n" not in data[len(kept):]
    assert entry["rows"] == max(0, kept.count(b"\n") - 1)


# ---------------------------------------------------------------------------------------
# SigMF (oppsched.analysis.sigmf: check_metadata, read_metadata, recover)

sigmf_keys = st.sampled_from(["core:datatype", "core:version", "core:sample_rate",
                              "core:extensions", "core:sample_start", "core:global_index",
                              "core:datetime", "core:sample_count", "core:label",
                              "oppsched:slot", "other:x", "nocolon", "name", "version",
                              "optional"])
sigmf_values = st.one_of(json_values, st.sampled_from(
    ["cf32_le", "ri8", "1.0.0", "2.0", "2026-01-01T00:00:00Z", "oppsched", 0, 1, -1, True]))
sigmf_objects = st.recursive(sigmf_values,
                             lambda inner: st.one_of(
                                 st.lists(inner, max_size=3),
                                 st.dictionaries(sigmf_keys, inner, max_size=6)),
                             max_leaves=20)


@st.composite
def sigmf_metadata(draw):
    """Metadata close to a real recording's, with fields replaced, removed or retyped."""
    meta = {"global": {"core:datatype": "cf32_le", "core:version": "1.0.0",
                       "core:sample_rate": 1e6,
                       "core:extensions": [{"name": "oppsched", "version": "1.0.0",
                                            "optional": True}]},
            "captures": [{"core:sample_start": 0, "core:global_index": 0,
                          "core:datetime": "2026-01-01T00:00:00Z"}],
            "annotations": [{"core:sample_start": 10, "core:sample_count": 5,
                             "oppsched:slot": 3}]}
    for _ in range(draw(st.integers(0, 4))):
        section = draw(st.sampled_from(["global", "captures", "annotations", None]))
        if section is None:
            meta[draw(st.sampled_from(["global", "captures", "annotations"]))] = \
                draw(sigmf_objects)
            continue
        part = meta.get(section)
        if isinstance(part, list) and part and isinstance(part[0], dict):
            part = part[0]
        if isinstance(part, dict):
            if draw(st.booleans()):
                part[draw(sigmf_keys)] = draw(sigmf_objects)
            elif part:
                part.pop(draw(st.sampled_from(sorted(part))))
    return meta


def _sigmf_base(meta_text: bytes | str) -> Path:
    base = scratch() / "rec"
    p = base.with_name("rec" + sigmf.META_SUFFIX)
    if isinstance(meta_text, str):
        p.write_text(meta_text)
    else:
        p.write_bytes(meta_text)
    return base


@FUZZ
@given(st.one_of(sigmf_metadata(), sigmf_objects))
def test_check_metadata_accepts_or_raises_sigmf_error(meta):
    try:
        sigmf.check_metadata(meta)
    except sigmf.SigMFError:
        return
    assert isinstance(meta, dict)


@FUZZ
@given(st.one_of(sigmf_metadata().map(lambda m: json.dumps(m)),
                 st.binary(max_size=200), st.text(max_size=200)))
@example("[" * 100_000)
@example(b"\xff\xfe{}")
def test_read_metadata_returns_checked_metadata_or_raises_sigmf_error(text):
    base = _sigmf_base(text)
    try:
        meta = sigmf.read_metadata(base)
    except sigmf.SigMFError as exc:
        assert "rec" in str(exc) or ":" in str(exc)
        return
    sigmf.check_metadata(meta)
    assert meta["global"]["core:datatype"] == sigmf.DATATYPE


@st.composite
def journals(draw):
    """A recorder's journal (JSON lines, as SigMFWriter writes it), then altered: fields
    retyped or removed, lines added, the last line cut."""
    writer = {"sample_rate": 1e6, "description": "d", "hw": "h", "frequency": 2.4e9,
              "t0_unix": 1.7e9, "extra_global": {"run": "r"}, "tail": 0}
    lines = [{"writer": writer}, {"t0_unix": 1.7e9}, {"segment": [0, 0]},
             {"annotation": [10, 5, "slot", "", {"slot": 3}]}, {"segment": [100, 500]},
             {"annotation": [510, 5, "", "c", {"slot": 4, "mcs": 2}]}]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        what = draw(st.integers(0, 3))
        entry = lines[i]
        if what == 0:
            lines[i] = draw(sigmf_objects)
        elif what == 1 and isinstance(entry, dict):
            k = next(iter(entry))
            if isinstance(entry[k], dict) and entry[k]:
                entry[k][draw(st.sampled_from(sorted(entry[k])))] = draw(json_values)
            elif isinstance(entry[k], list) and entry[k]:
                entry[k][draw(st.integers(0, len(entry[k]) - 1))] = draw(json_values)
            else:
                entry[k] = draw(json_values)
        elif what == 2:
            lines.insert(i, draw(st.dictionaries(st.sampled_from(
                ["segment", "annotation", "t0_unix", "writer", "x"]), json_values,
                min_size=1, max_size=1)))
        else:
            lines.pop(i)
    text = "".join(json.dumps(x) + "\n" for x in lines).encode()
    if draw(st.booleans()):
        text = text[:draw(st.integers(0, len(text)))]
    if draw(st.integers(0, 9)) == 0:
        text = draw(st.binary(max_size=100))
    return text, draw(st.integers(0, 2000))


@FUZZ
@given(journals())
def test_recover_completes_a_recording_or_raises_sigmf_error(journal_and_size):
    text, data_bytes = journal_and_size
    base = scratch() / "rec"
    base.with_name("rec" + sigmf.JOURNAL_SUFFIX).write_bytes(text)
    base.with_name("rec" + sigmf.DATA_SUFFIX).write_bytes(b"\0" * data_bytes)
    try:
        meta = sigmf.recover(base)
    except sigmf.SigMFError as exc:
        assert "rec" in str(exc)
        return
    # What recover writes is a recording the reader takes back.
    sigmf.check_metadata(meta)
    assert sigmf.read_metadata(base) == json.loads(sigmf.dumps(meta))


# ---------------------------------------------------------------------------------------
# The sweep section of an experiment file (oppsched.run.sweepspec through load_experiment)

EXPERIMENT = {
    "experiment": "fuzz", "kind": "macsim", "duration_s": 0.3, "seed": 7,
    "phy": {"slot_s": 1.667e-3, "rate_table": "evdo"},
    "scheduler": {"kind": "pf", "alpha": 0.03},
    "users": [{"name": "u1", "mean_snr_db": 0.0, "doppler_hz": 10.0}],
    "variants": [{"name": "rr", "set": {"scheduler.kind": "rr"}},
                 {"name": "pf", "set": {"scheduler.kind": "pf"}}],
}
small_numbers = st.one_of(st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
                          st.sampled_from([0.01, 0.5, 1e300, -1e300, 2**63]))
range_specs = st.fixed_dictionaries(
    {"from": st.one_of(small_numbers, json_scalars), "to": st.one_of(small_numbers, json_scalars),
     "steps": st.one_of(st.integers(-1, 6), json_scalars)},
    optional={"scale": st.sampled_from(["lin", "log", "cubic", 3]),
              "integer": st.one_of(st.booleans(), json_scalars),
              "extra": json_scalars})
axis_specs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"key": st.one_of(st.sampled_from(["scheduler.alpha", "users[0].mean_snr_db",
                                           "duration_s", "seed", "scheduler.kind",
                                           "users[9].x", "no.such.key", ""]),
                          st.lists(st.sampled_from(["scheduler.alpha", "duration_s", 3]),
                                   max_size=3),
                          json_scalars),
         "values": st.one_of(st.lists(st.one_of(small_numbers, json_values), max_size=3),
                             range_specs, json_scalars)},
        optional={"variants": st.one_of(st.lists(st.sampled_from(["rr", "pf", "x", 1]),
                                                 max_size=2), json_scalars)}))
sweep_sections = st.fixed_dictionaries(
    {"axes": st.one_of(st.dictionaries(st.sampled_from(["a", "b", "snr", "seed", "1x", "x-y"]),
                                       axis_specs, max_size=2), json_values)},
    optional={"repeat": st.one_of(st.integers(-1, 3), json_scalars),
              "plots": st.one_of(st.lists(st.fixed_dictionaries(
                  {"x": st.sampled_from(["a", "seed", "snr", "goodput"]),
                   "y": st.sampled_from(["flow.*.goodput_bps", 3])},
                  optional={"by": st.one_of(st.lists(st.sampled_from(["a", "b", "z"])),
                                            json_scalars)}), max_size=2), json_scalars)})


@settings(FUZZ, max_examples=20)
@given(sweep_sections)
@example({"axes": {"a": {"key": "scheduler.alpha",
                         "values": {"from": 1, "to": float("inf"), "steps": 3,
                                    "integer": True}}}})
@example({"axes": {"a": {"key": "scheduler.alpha",
                         "values": {"from": float("nan"), "to": 1, "steps": 2,
                                    "integer": True}}}})
@example({"axes": {"a": {"key": "scheduler.alpha",
                         "values": {"from": 1e-300, "to": 1e300, "steps": 3, "scale": "log",
                                    "integer": True}}}})
def test_a_sweep_section_loads_or_raises_config_error(sweep):
    p = scratch() / "exp.yaml"
    p.write_text(yaml.safe_dump({**EXPERIMENT, "sweep": sweep}))
    try:
        load_experiment(p)
    except ConfigError:
        return


# ---------------------------------------------------------------------------------------
# The run folder's CSV and JSON traces (readers.read_json, read_csv, read_slots)

csv_texts = st.one_of(
    st.binary(max_size=300),
    st.lists(st.lists(st.one_of(st.text(max_size=6), st.integers(), st.floats()),
                      max_size=5), max_size=6).map(
        lambda rows: "\n".join(",".join(str(c) for c in r) for r in rows).encode()))


@FUZZ
@given(st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode())))
@example(b"[" * 100_000)
@example(b"\xff\xfe\x00")
def test_read_json_returns_the_value_or_none_with_an_error_naming_the_file(data):
    p = scratch() / "trace.json"
    p.write_bytes(data)
    errors: list = []
    v = readers.read_json(p, errors)
    if v is None and data.strip() != b"null":
        assert len(errors) == 1 and errors[0].startswith("trace.json: ")
    else:
        assert errors == []


@FUZZ
@given(csv_texts)
@example(b"\xff\xfe\x00,\n1,2")
def test_read_csv_returns_a_frame_or_none_with_an_error_naming_the_file(data):
    d = scratch()
    (d / "slots.csv").write_bytes(data)
    errors: list = []
    df = readers.read_csv(d / "slots.csv", errors)
    if df is None:
        assert len(errors) == 1 and errors[0].startswith("slots.csv: ")
    else:
        assert isinstance(df, pd.DataFrame) and errors == []
    errors2: list = []
    df2 = readers.read_slots(d, errors2)
    assert (df2 is None) == (df is None) and errors2 == errors



# ---------------------------------------------------------------------------------------
# What the properties found, one test per behaviour

def test_when_a_capture_or_the_extensions_are_not_objects_then_check_metadata_names_them():
    meta = {"global": {"core:datatype": "cf32_le", "core:version": "1.0.0"},
            "captures": [0], "annotations": []}
    with pytest.raises(sigmf.SigMFError, match=r"^captures\[0\]: 0 is not an object"):
        sigmf.check_metadata(meta)
    meta = {"global": {"core:datatype": "cf32_le", "core:version": "1.0.0",
                       "core:extensions": 3}, "captures": [], "annotations": []}
    with pytest.raises(sigmf.SigMFError, match=r"^global.core:extensions: 3 is not an array"):
        sigmf.check_metadata(meta)


@pytest.mark.parametrize("text", [b"\xff\xfe{}", b"[" * 100_000])
def test_when_metadata_is_not_utf8_or_nested_too_deep_then_read_metadata_raises_sigmf_error(
        text):
    base = _sigmf_base(text)
    with pytest.raises(sigmf.SigMFError, match=r"rec\.sigmf-meta: not JSON"):
        sigmf.read_metadata(base)


def _journal(lines: list) -> Path:
    base = scratch() / "rec"
    base.with_name("rec" + sigmf.JOURNAL_SUFFIX).write_text(
        "".join(json.dumps(x) + "\n" for x in lines))
    base.with_name("rec" + sigmf.DATA_SUFFIX).write_bytes(b"\0" * 8 * 1000)
    return base


WRITER = {"sample_rate": 1e6, "description": "", "hw": "", "frequency": None,
          "t0_unix": 1.7e9, "extra_global": {}, "tail": 0}


@pytest.mark.parametrize("lines, what", [
    ([None], "line 1 does not describe the writer"),
    ([{"writer": {**WRITER, "sample_rate": "fast"}}], "line 1: writer.sample_rate: 'fast'"),
    ([{"writer": {**WRITER, "t0_unix": 1e300}}, {"segment": [0, 0]}],
     "segment 0: global index 0"),
    ([{"writer": {**WRITER, "extra_global": {"evil:x": 1}}}], "line 1: writer.extra_global"),
    ([{"writer": WRITER}, {"segment": [100, 0]}, {"segment": [0, 5]}], "line 3: segment"),
    ([{"writer": WRITER}, {"segment": [0, 0]}, {"annotation": [0, 5, "", "", {"slot": "x"}]}],
     "line 3: annotation"),
    ([{"writer": WRITER}, {"segment": [0, 0]}, {"annotation": [0, 5, "", "",
                                                               {"core:sample_start": -1}]}],
     "line 3: annotation"),
    ([{"writer": WRITER}, 7], "line 2: 7 is not an object"),
])
def test_when_a_journal_is_not_what_the_writer_writes_then_recover_raises_sigmf_error_naming_it(
        lines, what):
    base = _journal(lines)
    with pytest.raises(sigmf.SigMFError, match="rec.sigmf-journal: " + re.escape(what)):
        sigmf.recover(base)


def test_when_a_journal_is_not_utf8_then_recover_raises_sigmf_error_naming_it():
    base = _journal([{"writer": WRITER}])
    base.with_name("rec" + sigmf.JOURNAL_SUFFIX).write_bytes(b"\xff\xfe\n")
    with pytest.raises(sigmf.SigMFError, match=r"rec\.sigmf-journal: not UTF-8"):
        sigmf.recover(base)


def test_a_journal_as_the_writer_writes_it_still_recovers():
    base = _journal([{"writer": WRITER}, {"segment": [0, 0]},
                     {"annotation": [10, 5, "slot", "", {"slot": 3}]}])
    meta = sigmf.recover(base)
    sigmf.check_metadata(meta)
    assert meta["annotations"][0]["oppsched:slot"] == 3


@pytest.mark.parametrize("data", [b"\xff\xfe\x00", b"[" * 100_000])
def test_when_a_json_trace_is_not_utf8_or_nested_too_deep_then_read_json_is_none_with_an_error(
        data):
    p = scratch() / "flow.1.receiver.json"
    p.write_bytes(data)
    errors: list = []
    assert readers.read_json(p, errors) is None
    assert len(errors) == 1 and errors[0].startswith("flow.1.receiver.json: ")
