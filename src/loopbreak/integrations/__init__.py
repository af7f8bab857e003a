"""In-process integrations: one module per library, each behind its own extra.

A library is imported only inside its own module, never here.
"""
