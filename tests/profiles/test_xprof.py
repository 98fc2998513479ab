"""xprof's converters as `profiles._xprof` runs them: what the rest of the process
can still do afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_pyarrow_still_works_after_xprofs_events_db_converted_a_trace(trace_file, tmp_path):
    """xprof 2.24's events DB (its Parquet export of a trace) loads its own Arrow with
    global symbols: a ``pyarrow.dataset`` imported after it crashes the process, a
    ``pyarrow.compute`` raises ``KeyError: 'utf8_zero_fill'``. `profiles` imports both
    before any xprof library, so a process that analysed a profile can export it and
    read Parquet after. (In a child process: the failure it guards against is a crash.)"""
    events_db = pytest.importorskip("xprof.convert.events_db.python.pywrap_events_db_c_api")
    del events_db
    script = textwrap.dedent(
        f"""
        import sys
        from profiles._xprof import xprof_tables
        xprof_tables([{str(trace_file)!r}], ("framework_op_stats",))
        from xprof.convert.events_db.python import pywrap_events_db_c_api as events_db
        events_db.xspace_to_parquet(input_path={str(trace_file)!r}, output_path={str(tmp_path / "e.parquet")!r})
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
        table = ds.dataset({str(tmp_path / "e.parquet")!r}).to_table()
        steps = pc.unique(table["step"]).to_pylist()
        print("rows", table.num_rows, "steps", len([s for s in steps if s]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows, steps = done.stdout.split()[1::2]
    assert int(rows) > 0 and int(steps) >= 3
