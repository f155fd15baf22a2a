"""Regression tests for what the fuzz tier (tests/unit/test_fuzz_*.py) found, each with the
failing example hypothesis reported. (The Lua escape bug it found is tested in
test_directives_lua.py: test_control_character_before_a_digit_reaches_lua_intact and
test_entitlements_strings_survive_lua_escapes.)"""

from __future__ import annotations

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
