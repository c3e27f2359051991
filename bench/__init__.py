"""Benchmarks of ftcourse: speed against the usual tools, and the course's own cost.

``python -m bench`` (or ``make bench``) runs every benchmark and prints one table. Each
benchmark measures its ratios side by side in one process, because absolute times on a
shared machine drift. See ``bench/README.md`` for the latest table and what it means.
"""
