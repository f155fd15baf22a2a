"""The priority daemon: the loop, one pure cycle, the wiring of planner and executor, metrics."""
