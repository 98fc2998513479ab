"""The public file-format modules: `tfinput.formats.parquet`, `tfinput.formats.tfrecord`,
`tfinput.formats.csv` (docs/api.md). Implemented in `tfinput._src.core.formats`."""
