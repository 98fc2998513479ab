"""The measurement layer: how a pipeline feeding a step is timed (window plans, probes,
statistics, what is measured), the training steps measured against and the built-in
models they train, device prefetch. Imports only the core."""
