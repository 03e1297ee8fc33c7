"""Lab runners, the native Redis launcher, live panels and student kits.

``labs`` may import ``solutions``; ``solutions`` never imports ``labs``.
"""
