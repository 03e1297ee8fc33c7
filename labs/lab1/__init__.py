"""Lab 1 (module 1): the student kit (README, starter) and the runner's scenario and checks."""
