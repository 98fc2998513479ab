"""Where batches come from: TFRecord, Parquet, or a user's dataset.

A source (see the `Source` protocol in `tfinput._src.core.sources.protocol`) turns a list of files
(already sharded for this input pipeline) and a `PipelineConfig` into records, batches
them and gives a ``decode`` function that maps one encoded batch to a raw batch (see
`tfinput.transforms`). `tfinput.Pipeline.build` strings the steps together and fuses
``decode`` with the transforms into one parallel ``map``, so parsing is vectorized:
batch first, then parse.

Modules: `protocol` (the `Source` contract, and the skeleton steps sources and the
pipeline share), `files` (paths and empty files), and one per source: `tfrecord`,
`parquet`, `dataset`. The columnar records' source is `tfinput._src.core.columnar.source`,
with the rest of that format.
"""
