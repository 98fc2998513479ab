"""The measurement layer: how a pipeline feeding a step is timed (window plans, probes,
statistics, what is measured, configs side by side, the roofline), the training steps
measured against and the Keras models they train (`models`). Bench, the tuner and the
profiler all measure with it. Imports only the core."""
