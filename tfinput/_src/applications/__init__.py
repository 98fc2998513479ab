"""The applications and integrations layer: bench, convert, schema inference, the CLI,
TPU and SparseCore, serving, retrieval, tf.data service fleets, test data. Imports the
core and the measurement layer; `tuners` and `profiles` sit beside it."""
