"""Hand-written model definitions for the zoo (plain torch; see ``cloudfit.profiling.zoo`` for why).

Each module imports torch at the top, so only ``zoo.build()`` imports them.
"""
