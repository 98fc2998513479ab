"""The core layer: what the data is and how it becomes fixed-shape batches (schema,
config, errors, file formats, sources, transforms, layouts, the pipeline, resume,
device prefetch).
Imports nothing above it."""
