"""Real verl's `verl.experimental.dataset`: the sampler interfaces (sampler.py)."""
