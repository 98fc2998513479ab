"""The columnar pre-batched records format (described in `tfinput.columnar_records`):
`format` (keys, dtypes, column layouts), `manifest` (the data set's manifest and
integrity digests) and `writer` (`ColumnarWriter`). Reading it into a pipeline is
`tfinput._src.core.sources.columnar`'s job."""
