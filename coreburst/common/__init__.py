"""The bottom layer every part of coreburst imports and that imports none of them.

The instance catalog (prices and accelerator facts with their date and source), the telemetry
contract between node-side publishers and the daemon, per-item price functions, text input and
the one-line error format.
"""
