"""Columnar pre-batched records, in one package (the layout is described in
`tfinput.columnar_records`, the public module over it):

- `format`: the format version, record keys, dtypes, stored columns and checksums, and
  the data set's ``manifest.json``, its integrity digests, how it is found;
- `writer`: `ColumnarWriter`, tables to chunks in sharded files plus the manifest, and
  `verify_files`, every chunk of a data set checked offline;
- `reader` (over `_decode`, a chunk record's parse spec and the assembly of its
  columns): the native tf.data read path;
- `source`: `ColumnarSource`, the `tfinput._src.core.sources.protocol.Source` over them (files,
  build-time checks, the steps it gives the pipeline).

The builder, `tfinput.columnar`, sits beside `tfinput.tfrecord` and `tfinput.parquet`
in `tfinput._src.core.pipeline`; conversion to the format is
`tfinput._src.applications.convert`'s job.
"""
