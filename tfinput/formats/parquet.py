"""Parquet files: opening (local paths and URIs), footers, reading and writing."""

from tfinput._src.core.formats.parquet import footer as footer
from tfinput._src.core.formats.parquet import is_parquet_name as is_parquet_name
from tfinput._src.core.formats.parquet import iter_batches as iter_batches
from tfinput._src.core.formats.parquet import num_rows as num_rows
from tfinput._src.core.formats.parquet import open_file as open_file
from tfinput._src.core.formats.parquet import read_schema as read_schema
from tfinput._src.core.formats.parquet import row_groups as row_groups
from tfinput._src.core.formats.parquet import write_table as write_table
from tfinput._src.core.formats.parquet import writer as writer
