"""Columnar pre-batched records: a storage layout read at near memory speed, natively."""

from tfinput._src.applications.columnar_records import DEFAULT_CHUNK_ROWS as DEFAULT_CHUNK_ROWS
from tfinput._src.applications.columnar_records import EXTENSION as EXTENSION
from tfinput._src.applications.columnar_records import FORMAT as FORMAT
from tfinput._src.applications.columnar_records import MANIFEST as MANIFEST
from tfinput._src.applications.columnar_records import ChunkProblem as ChunkProblem
from tfinput._src.applications.columnar_records import Column as Column
from tfinput._src.applications.columnar_records import ColumnarSource as ColumnarSource
from tfinput._src.applications.columnar_records import ColumnarWriter as ColumnarWriter
from tfinput._src.applications.columnar_records import FileEntry as FileEntry
from tfinput._src.applications.columnar_records import Manifest as Manifest
from tfinput._src.applications.columnar_records import columnar as columnar
from tfinput._src.applications.columnar_records import is_columnar as is_columnar
from tfinput._src.applications.columnar_records import merge_manifests as merge_manifests
from tfinput._src.applications.columnar_records import read_manifest as read_manifest
from tfinput._src.applications.columnar_records import storage_columns as storage_columns
from tfinput._src.applications.columnar_records import verify_files as verify_files
