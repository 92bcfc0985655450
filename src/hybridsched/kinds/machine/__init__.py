"""The machine kind: one CPU and several GPUs, tasks split between them."""
