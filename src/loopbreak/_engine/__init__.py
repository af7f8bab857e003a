"""The engine: pure, incremental detectors and the guards that compose them.

No I/O, no clock, no framework: adapters feed it deltas and act on its answers.
"""
