"""The method as pure functions (docs/method/): context labels, capacity, the measurement window and its
spread, a cell's status, statistics, overhead, and numbers printed and parsed as the published reports do.
No I/O here.
"""
