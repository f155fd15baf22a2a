"""Regression tests for what the fuzz tier (tests/unit/test_fuzz_*.py) found, each with the
failing example hypothesis reported. (The Lua escape bug it found is tested in
test_directives_lua.py: test_control_character_before_a_digit_reaches_lua_intact and
test_entitlements_strings_survive_lua_escapes.)"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hai_slurm.errors import ConfigError
from hai_slurm.priority.sim.cluster import alibaba_description
from hai_slurm.priority.sim.sacct import read_sacct
from hai_slurm.priority.sim.trace import load_trace, read_alibaba, read_generic


def test_node_list_row_shorter_than_the_header(tmp_path: Path) -> None:
    """Found by test_alibaba_node_list: a row with fewer fields than the header gave
    ``TypeError: int() argument must be ... not 'NoneType'``."""
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\no")
    with pytest.raises(ConfigError, match=r"nodes.csv: line 2: has 1 fields, the header 5"):
        alibaba_description(path)


@pytest.mark.parametrize("reader", [read_generic, read_alibaba, load_trace, alibaba_description,
                                    read_sacct])
def test_non_utf8_trace_names_line_and_byte(tmp_path: Path,
                                            reader: Callable[[Path], object]) -> None:
    """Found by test_any_bytes_to_every_reader with ``b'\\x80'``: the CSV readers raised
    UnicodeDecodeError; every reader now says which byte on which line."""
    path = tmp_path / "trace.csv"
    path.write_bytes(b"submit,duration\n\x80")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(.* must be UTF-8\): byte 0x80 "
                                          r"at line 2"):
        reader(path)


@pytest.mark.parametrize("reader", [read_generic, alibaba_description])
def test_csv_field_over_the_csv_module_limit(tmp_path: Path,
                                             reader: Callable[[Path], object]) -> None:
    """Seen while fixing the above (not by the fuzzer, whose fields are short): a field over
    131072 characters made the csv module raise csv.Error through the readers."""
    path = tmp_path / "trace.csv"
    path.write_text("submit,duration,gpus,nodes,team,class,sn,cpu_milli,memory_mib,gpu,model\n"
                    + "x" * 200_000 + "\n")
    with pytest.raises(ConfigError, match=r"line \d+: not CSV \(field larger than field limit"):
        reader(path)


TOPO = Path(__file__).parents[1] / "data" / "topo"


@pytest.mark.parametrize(("cpus", "message"), [
    ("176-4294967294191", r"bad CPU range '176-4294967294191' .*CPU ids go up to 65535"),
    ("176-18446744073709551615191", r"bad CPU range .* CPU ids go up to 65535"),
])
def test_huge_cpu_affinity_range(cpus: str, message: str) -> None:
    """Found by test_topo_matrix (HAI_FUZZ_EXAMPLES=1000): a CPU Affinity of 176-4294967294191
    made discovery build a list of billions of CPUs (MemoryError), one of
    176-18446744073709551615191 raised OverflowError; both are now errors naming the line."""
    from hai_slurm.conf.discover_run import Sources, discover

    text = (TOPO / "dgx-a100.txt").read_text().replace("48-63,176-191", f"48-63,{cpus}", 1)
    with pytest.raises(ConfigError, match=r"line 2: bad CPU Affinity for GPU0: " + message):
        discover("t", Sources(topo=(text, "topo.txt")))


def test_cpu_list_that_runs_backwards() -> None:
    """Seen with the above: 63-48 was silently an empty list of CPUs."""
    from hai_slurm.conf.discover_parse import parse_cpu_list

    with pytest.raises(ConfigError, match=r"bad CPU range '63-48' in '63-48': it runs backwards"):
        parse_cpu_list("63-48")


@pytest.mark.parametrize("digit", ["\u00b2", "\u0663"])
def test_non_ascii_digits_in_lscpu_and_numa_affinity(digit: str) -> None:
    """Seen while fixing the above: str.isdigit() accepts '²' (then int() raises ValueError)
    and '٣'; lscpu counts and the NUMA Affinity column now take ASCII digits only."""
    from hai_slurm.conf.discover_parse import parse_lscpu, parse_topo_matrix

    lscpu = re.sub(r"Socket\(s\): +2", f"Socket(s): {digit}",
                   (TOPO / "dgx-a100.lscpu.txt").read_text())
    with pytest.raises(ConfigError, match=r"Socket\(s\) is not a number"):
        parse_lscpu(lscpu)
    topo = (TOPO / "dgx-a100.txt").read_text().replace("48-63,176-191\t3", f"48-63\t{digit}", 1)
    with pytest.raises(ConfigError, match="bad NUMA Affinity"):
        parse_topo_matrix(topo)


def test_bad_numa_cpu_list_in_lscpu_names_the_line() -> None:
    """A NUMA node line of lscpu that is no CPU list: an error at parse time, not a
    ValueError later in discovery."""
    from hai_slurm.conf.discover_parse import parse_lscpu

    text = (TOPO / "dgx-a100.lscpu.txt").read_text().replace("0-15,128-143", "0-15,x", 1)
    with pytest.raises(ConfigError, match=r"NUMA node0 CPU\(s\): bad CPU list '0-15,x'"):
        parse_lscpu(text)


@pytest.mark.parametrize(("start", "message"), [
    ("NaN", r"field 'time.start': expected a number .*got nan"),
    ("Infinity", r"field 'time.start': expected a number .*got inf"),
    ("1e300", r"field 'time.start': not a POSIX time \(seconds since 1970, before the year "
              r"10000\)"),
])
def test_sacct_json_time_that_is_no_time(tmp_path: Path, start: str, message: str) -> None:
    """Seen while reviewing the sacct fuzz test (its values include NaN, not yet at a time
    field within the CI budget): json reads NaN and Infinity, and the adapter's number()
    raised ValueError on them; a time past the year 9999 made a trace datetime cannot show."""
    path = tmp_path / "sacct.json"
    path.write_text('{"jobs": [{"job_id": 4, "account": "a", "qos": "high", "time": '
                    f'{{"submission": 1, "start": {start}, "end": 3}}, "allocation_nodes": 1}}]}}')
    with pytest.raises(ConfigError, match=r"jobs\[0\] \(job 4\), " + message):
        read_sacct(path)


def test_adapter_number_refuses_non_finite_floats() -> None:
    """The adapter's number() (squeue/sinfo JSON) says what it got instead of a ValueError."""
    from hai_slurm.errors import SlurmError
    from hai_slurm.slurm_plugins.parse import number

    with pytest.raises(SlurmError, match=r"priority: expected a number, got nan"):
        number(float("nan"), "priority")


def test_node_list_with_a_huge_gpu_count(tmp_path: Path) -> None:
    """Found by test_alibaba_node_list at HAI_FUZZ_EXAMPLES=1000: a node with a GPU count such
    as 18446744073709551615 made the reader build PCIe switches for every GPU until the machine
    ran out of memory (the run was OOM-killed); a node now holds at most 64 GPUs."""
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,18446744073709551615,"
                    "P100\n")
    with pytest.raises(ConfigError, match=r"line 2: gpu 18446744073709551615 is more GPUs than "
                                          r"a node holds \(at most 64\)"):
        alibaba_description(path)
