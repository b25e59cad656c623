"""Hostile and broken evidence files (issue 29), through the real `dtplan`: each is read, or
refused with one line naming file:line and the field (exit 2) — never exit 3, a hang or a
blow-up. Mutated copies of the real fixtures are made in tmp_path; linearity is asserted by
counting the characters the trace reader decodes, not by timing it."""

from __future__ import annotations

import gzip
import json
import pickle
import re
from pathlib import Path

import pytest

from conftest import one_input_error

from evidence_paths import DATA, real
from planner.errors import InputError
from planner.evidence import stream
from planner.evidence.trace import read_trace_file

TRACE = "traces/hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz"
LOG = DATA / "torchtitan_llama3.1-8b_8xh100.log"


def _events(path: Path) -> dict:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def _summary(dtplan, path: Path) -> dict:
    r = dtplan("calibrate", "--from", path, "-f", "json")
    assert r.code == 0, r
    (ev,) = r.json()["evidence"]
    ev.pop("path")
    return ev


# ---- the trace reader: linear whatever the layout -------------------------------------------

def _layouts(doc: dict) -> dict[str, str]:
    events = doc["traceEvents"]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    return {
        "sorted": json.dumps(doc, sort_keys=True),
        "sorted-compact": json.dumps(doc, sort_keys=True, separators=(",", ":")),
        "newline-comma": '{"traceEvents": [' + "}\n,".join(json.dumps(e)[:-1] for e in events)
                         + "}],\n" + json.dumps(head)[1:],
        "indented": json.dumps(doc, indent=1),
        "events-last-after-2mib": json.dumps({"padding": "x" * (2 << 20), **doc}),
    }


def test_a_real_trace_in_any_layout_reads_the_same(dtplan, tmp_path):
    src = real(TRACE)
    doc = _events(src)
    want = _summary(dtplan, src)
    for name, text in _layouts(doc).items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        assert _summary(dtplan, p) == want, name


class _Counting:
    """A JSON decoder counting the characters it is asked to decode."""

    def __init__(self, inner: object, counter: list[int]):
        self._inner, self._counter = inner, counter

    def decode(self, s: str) -> object:
        self._counter[0] += len(s)
        return self._inner.decode(s)  # type: ignore[attr-defined]

    def raw_decode(self, s: str, idx: int = 0) -> object:
        self._counter[0] += 1   # a decode of one value reads that value: counted by its size
        value, end = self._inner.raw_decode(s, idx)  # type: ignore[attr-defined]
        self._counter[0] += end - idx
        return value, end


@pytest.mark.parametrize("layout", ["sorted", "newline-comma", "non-objects"])
def test_the_trace_reader_decodes_each_character_a_bounded_number_of_times(
        tmp_path, monkeypatch, layout):
    # was quadratic: a failed batch re-decoded the whole look-ahead buffer once per event
    doc = _events(real(TRACE))
    if layout == "non-objects":
        text = '{"traceEvents": [' + ",".join(["[1, 2, 3]"] * 200_000) + "]}"
    else:
        text = _layouts(doc)[layout]
    p = tmp_path / "t.json"
    p.write_text(text)
    monkeypatch.setattr(stream, "CHUNK_CHARS", 1 << 16)   # many refills and cuts
    counter = [0]
    real_init = stream.TraceStream.__init__

    def init(self, fh, path):  # type: ignore[no-untyped-def]
        real_init(self, fh, path)
        self._fast = _Counting(self._fast, counter)
        self._dec = _Counting(self._dec, counter)
    monkeypatch.setattr(stream.TraceStream, "__init__", init)
    try:
        read_trace_file(p)
    except InputError as e:   # non-object events: no GPU kernels, after reading them all
        assert "without GPU kernels" in str(e)
    assert counter[0] <= 3 * len(text), (counter[0], len(text))


def test_a_truncated_trace_names_its_last_line(dtplan, tmp_path):
    text = json.dumps(_events(real(TRACE)), indent=1)
    cut = text[:len(text) // 3]
    p = tmp_path / "killed.json"
    p.write_text(cut)
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:", "invalid trace JSON")
    line = int(re.search(r"killed\.json:(\d+):", dtplan("calibrate", "--from", p).err)[1])
    assert abs(line - cut.count("\n") - 1) <= 1


def test_non_trace_json_objects_are_bounded_while_streamed(tmp_path, monkeypatch):
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"a": "x" * 5000, "b": "y" * 5000, "traceEvents": []}))
    monkeypatch.setattr(stream, "MAX_VALUE_CHARS", 8000)
    with pytest.raises(InputError, match="other than traceEvents over"):
        read_trace_file(p)


def test_a_gzip_bomb_is_refused_while_decompressing(dtplan, tmp_path):
    bomb = tmp_path / "bomb.json.gz"   # 48 MiB of JSON whitespace in ~48 kB
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (48 << 20) + b"]}", 9))
    one_input_error(dtplan("calibrate", "--from", bomb), f"{bomb}:1:", "decompression bomb")
    # the text readers stream through the same gzip stream, its first 8 MiB read before any
    # line is parsed: refused unparsed, a log's first line before it or not
    step = b"[titan] step: 1  loss: 7.1  memory: 81.85GiB(86.17%)  tps: 1,874  tflops: 38  mfu: 3%"
    text_bomb = tmp_path / "bomb.log.gz"
    for head in (b"", step):
        text_bomb.write_bytes(gzip.compress(head + b"\n" * (48 << 20), 9))
        one_input_error(dtplan("calibrate", "--from", text_bomb), f"{text_bomb}:1:",
                        "decompression bomb")


def test_a_gzip_trailer_over_the_ceiling_is_refused_unread(dtplan, tmp_path):
    data = bytearray(gzip.compress(b'{"traceEvents": []}'))
    data[-4:] = (3 << 30).to_bytes(4, "little")    # ISIZE: 3 GiB of content
    p = tmp_path / "huge.json.gz"
    p.write_bytes(bytes(data))
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:1:", "larger than 512 MiB")


@pytest.mark.parametrize("field,value", [("ts", "1e308"), ("dur", "1e308"), ("dur", "-5"),
                                         ("ts", '"late"')])
def test_absurd_trace_times_name_the_field(dtplan, tmp_path, field, value):
    doc = _events(real(TRACE))
    k = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][k][field] = "@@"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=1).replace('"@@"', value))
    line = one_input_error(dtplan("calibrate", "--from", p), f"{p}:")
    assert field in line or "numeric ts/dur" in line


def test_a_400_digit_integer_in_a_trace_is_refused(dtplan, tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ' + "9" * 400
                 + ', "dur": 1}]}')
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:1:", "400 digits")


# ---- the snapshot pickle: bounded while parsing ----------------------------------------------

def _bombs() -> dict[str, tuple[bytes, str]]:
    blk = {"state": "active_allocated", "size": 1}
    shared = [{"action": "alloc", "size": 1}] * 50_000
    return {
        # ~400 kB: 10^5 references to one segment of 10^5 references: 10^10 visits
        "hang": (pickle.dumps({"segments": [{"total_size": 2, "blocks": [blk] * 100_000}]
                               * 100_000}, 4), "repeat shared references"),
        # ~200 kB: a flattened device trace of 2.5 x 10^9 entries
        "oom": (pickle.dumps({"segments": [], "device_traces": [shared] * 50_000}, 4),
                "repeat shared references"),
        # 8 bytes: a memo index making the unpickler allocate 2^33 pointers
        "memo": (b"\x80\x04]r\xff\xff\xff\xff.", "memo index"),
        "long4": (b"\x80\x04\x8b" + (10**6).to_bytes(4, "little") + b"\x01" * 10**6 + b".",
                  "an integer of 1000000 bytes"),
        "2^1024": (pickle.dumps({"segments": [{"total_size": 2**1024}]}, 4),
                   "an integer of 129 bytes"),
        "2^60": (pickle.dumps({"segments": [{"total_size": 2**60}]}, 4),
                 "segments[0].total_size: 1152921504606846976 is out of range"),
        "string": (pickle.dumps({"segments": [{"total_size": "12"}]}, 4),
                   "segments[0].total_size: expected an integer byte count, got str"),
        "block": (pickle.dumps({"segments": [{"total_size": 4, "blocks": [
            {"state": "active_allocated", "size": -1}]}]}, 4), "blocks[0].size: -1"),
        "truncated": (pickle.dumps({"segments": [{"total_size": 4}]}, 4)[:-5] + b".",
                      "refused"),
        "global": (b"\x80\x02cos\nsystem\n.", "refusing to load os.system"),
    }


@pytest.mark.parametrize("name", list(_bombs()))
def test_pickle_bombs_are_refused_naming_why(dtplan, tmp_path, name):
    raw, needle = _bombs()[name]
    p = tmp_path / f"{name}.pickle"
    p.write_bytes(raw)
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:1:", needle)


def test_a_plain_snapshot_still_reads(dtplan, tmp_path):
    snap = {"segments": [{"total_size": 2 << 20, "blocks": [
        {"state": "active_allocated", "size": 1 << 20}, {"state": "inactive", "size": 1 << 20}]}],
        "device_traces": [[{"action": "alloc", "size": 1 << 20, "frames": [
            {"filename": "train.py", "line": 3, "name": "f"}] * 3}]]}
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(snap))
    r = dtplan("calibrate", "--from", p, "-f", "json")
    assert r.code == 0, r
    mem = r.json()["evidence"][0]["memory"]
    assert mem["reserved_bytes"] == 2 << 20 and mem["allocated_bytes"] == 1 << 20


# ---- absurd numbers in logs and tables -------------------------------------------------------

@pytest.mark.parametrize("key,value,needle", [
    ("tps", "1e308", "tps: 1e308 is out of range"),
    ("tps", "9" * 400, "tps: '99999999999999999999'… (400 characters)"),
    ("memory", "1e308", "memory: 1e308 is out of range"),
    ("tflops", "nan", "tflops: nan is out of range"),
    ("step", "9" * 5000, "step: '99999999999999999999'… (5000 characters) is not an integer"),
])
def test_absurd_log_numbers_name_file_line_and_field(dtplan, tmp_path, key, value, needle):
    text = LOG.read_text()
    p = tmp_path / "train.log"
    p.write_text(re.sub(rf"{key}: *[0-9.,]+", f"{key}: {value}", text))
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:2:", needle)


@pytest.mark.parametrize("old,new,needle", [
    ("132.44  231.76", "132.44  1e308", "busbw 1e308 is out of range"),
    ("132.44  231.76", "132.44  1e999", "is not a non-negative number"),
    ("132.44  231.76", "132.44  2.3.1", "'2.3.1' is not a number"),
])
def test_malformed_nccl_numbers_name_the_row(dtplan, tmp_path, old, new, needle):
    src = real("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt").read_text()
    assert old in src
    p = tmp_path / "all_reduce_perf.txt"
    p.write_text(src.replace(old, new, 1))
    line = src[:src.index(old)].count("\n") + 1
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:{line}:", needle)


def test_an_nccl_size_in_superscript_digits_is_not_a_row(dtplan, tmp_path):
    src = real("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt").read_text()
    row = next(x for x in src.splitlines() if x.strip().startswith("8589934592"))
    p = tmp_path / "all_reduce_perf.txt"
    p.write_text(src.replace(row, row.replace("8589934592", "8589934592²", 1)))
    r = dtplan("calibrate", "--from", p)
    assert r.code in (0, 2) and "Traceback" not in r.err and "internal error" not in r.err, r


def test_absurd_golden_values_name_the_step(dtplan, tmp_path):
    src = real("training/megatron-lm-ci_mixtral-8x7b_tp2-pp4-vpp-ep8_dgx-h100_golden-values.json")
    doc = json.loads(src.read_text())
    step = next(iter(doc["iteration-time"]["values"]))
    doc["iteration-time"]["values"][step] = 1e308
    p = tmp_path / "golden.json"
    p.write_text(json.dumps(doc, indent=1))
    one_input_error(dtplan("calibrate", "--from", p), f"{p}:", f"iteration-time.values['{step}']: 1e+308")


# ---- real variation accepted ------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["memory/pytorch-issue35901_memory_summary_EXCERPT.txt",
                                 "memory/fairseq-issue2442_memory_summary_v100-32gb_ddp-oom_EXCERPT.txt"])
def test_a_memory_summary_pasted_without_its_header_reads(dtplan, tmp_path, rel):
    src = real(rel)
    whole = _summary(dtplan, src)
    lines = src.read_text().replace("||", "|\n|").splitlines(keepends=True)
    start = next(i for i, x in enumerate(lines) if x.startswith("| Allocated memory"))
    p = tmp_path / "pasted.txt"
    p.write_text("".join(lines[start:]))
    got = _summary(dtplan, p)
    assert got["memory"]["peak_allocated_bytes"] == whole["memory"]["peak_allocated_bytes"] > 0


def test_log_lines_with_extra_prefixes_read_the_same(dtplan, tmp_path):
    src = real("training/torchtitan-pr950_llama3-debugmodel_h100_EXCERPT.log")
    want = _summary(dtplan, src)["steps"]
    prefixed = [f"2025-03-12T10:00:{i:02d}.123Z [pod/trainer-0/main] {x}" if x.strip() else x
                for i, x in enumerate(src.read_text().splitlines())]
    p = tmp_path / "kubectl.log"
    p.write_text("\n".join(prefixed) + "\n")
    assert _summary(dtplan, p)["steps"] == want
