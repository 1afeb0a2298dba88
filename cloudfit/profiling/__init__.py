"""Profiling: the model zoo, short timed training runs, FLOP/byte/parameter counting, profile I/O.

Submodules import torch lazily (``zoo`` and ``io`` not at all), so importing this package is cheap:
    zoo      names(), info(), build(), load_user_model(), ZooModel
    stats    model_stats(): device-independent counts (meta device, no real compute)
    runner   profile_run(): warm-up + timed optimizer steps → a Profile with one Measurement
    device   select_device(), canonical_device_name()
    io       load/save/resolve profiles, add_measurement()
"""
